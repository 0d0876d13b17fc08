"""Constants of ``difficulty_based``'s selection engine: chunking, float32 error margins, index and sampler limits.

The engine reads the tunables from this module at call time (``tuning.CHUNK``, never a copy), so a change here takes
effect at once, e.g. ``flexkit.selectors.difficulty_based.tuning.THREADS = 2``; tests patch them the same way. Only
the unit roundoffs ``U32``, ``U64`` are imported by name.
"""

from __future__ import annotations

#: Number of tasks processed per vectorised step of a full pass (keeps temporaries in cache).
CHUNK = 1 << 16
#: Threads for the float32 pass of ``tau = 0`` (numpy releases the GIL in its loops). 1 (the default) runs it
#: inline; 2 made a step at N = 10^6 about 1.3× faster on an idle 2-core machine but slower on a busy one,
#: so splitting is opt-in: ``flexkit.selectors.difficulty_based.tuning.THREADS = 2``.
THREADS = 1
#: Below this many tasks the pass always runs in the calling thread.
PARALLEL_MIN = 1 << 18
#: Unit roundoff of float32.
U32 = 2.0**-24
#: Unit roundoff of float64.
U64 = 2.0**-53
#: Bound on |float32 cost − float64 cost| of one task. The float steps of the fast pass err by at most about
#: 50·U32 (every term is at most 5·(α+β)/a, see :mod:`~flexkit.selectors.difficulty_based._costs`); the margin
#: leaves a factor 2.5.
COST32_MARGIN = 128 * U32
#: Up to this many tasks the features get float32 copies for the fast pass (8 bytes per task); above it the
#: pass reads the float64 features (slower, but no extra memory at N = 10^8).
FEATURE_MIRROR_MAX = 1 << 25
#: Up to this many tasks the float32 mirrors ``D``, ``S`` of the state are kept (8 bytes per task, updated at each
#: feedback, rebuilt at a fold); above it every pass computes them chunk by chunk from the stored posteriors.
MIRROR_MAX = FEATURE_MIRROR_MAX
#: The float32 pass is used only while every magnitude it meets stays below this (float32 max is 3.4e38).
FLOAT32_LIMIT = 1e36
#: Envelope sampler: block width, and the clamp of the exponent in temperature units (e^-80 is a normal float32).
ENVELOPE_BLOCK = 64
ENVELOPE_CLAMP = 80.0
#: The envelope stage runs only while its float32 slack ``COST32_MARGIN/τ`` stays below this (acceptance ≥ e^-1).
ENVELOPE_MAX_SLACK = 1.0
#: Below this temperature softmax sampling is taken as the greedy top-k: costs are differences of doubles in
#: [0, 1] that, unless tied, differ by far more than 1000·τ (weights apart by e^1000 and more), and cost/τ would
#: leave float64 for the smallest τ.
GREEDY_TAU = 1e-290
#: Gumbel window: tasks costing more than the r-th smallest + τ·(ln N + GUMBEL_WINDOW) are left out of the
#: last-resort sampler (together they would be drawn with probability below e^-40).
GUMBEL_WINDOW = 45.0
#: Greedy index (``tau = 0``): used for tasksets of this many tasks and more (below, the float32 pass is as fast:
#: the index scores the ~10^4 recently observed tasks at every step whatever N)...
INDEX_MIN = 1 << 17
#: ...and at most this many (the compact grid packs a task's index in 27 bits of a uint32).
INDEX_MAX = 1 << 27
#: Up to this many tasks the index keeps a ``SlabGrid`` per key feature (8 bytes per task each, up to two) and a
#: dirty stamp per task (4 bytes); above, one ``CompactGrid`` (4 bytes per task) and a dirty bit per task.
INDEX_DENSE_MAX = FEATURE_MIRROR_MAX
#: Above ``INDEX_DENSE_MAX`` tasks the one grid is rebuilt keyed on the other feature only once that feature's
#: coefficient is this many times larger (a rebuild sorts every task again).
GRID_SWAP = 8.0
#: A group of observed tasks is released (scored through the grid again) once its residual can move a cost by
#: at most about this much; the regular tasks' cost bound, and so the slab's widening, stays near it.
RELEASE_EPS = 2.0**-12
#: At most this many dirty tasks (scored one by one at every selection), or DIRTY_FRACTION of the tasks if
#: more; beyond, the oldest groups are released early (a small ``lamb`` keeps observations relevant for long).
DIRTY_MAX = 1 << 15
DIRTY_FRACTION = 1 / 16
#: The index gives way to the float32 pass when it would score more than this fraction of the tasks.
INDEX_BUDGET = 0.125
#: The slab search aims at this many times k tasks, in at most SLAB_STEPS tries.
SLAB_TARGET = 32
SLAB_STEPS = 40
#: The slab search estimates the distance of the 2k-th nearest of more than this many tasks from a sample of this
#: many (reading every one's features at random cost more than the rest of a step at 10^8 tasks).
DISTANCE_SAMPLE = 4096

#: Largest taskset whose α̃, β̃ are two dense arrays (16 bytes per task, plain indexing); larger tasksets keep
#: them only for recently observed tasks (the sparse store, 4 bytes per task plus the stored ones).
DENSE_STORE_MAX = 1 << 24
