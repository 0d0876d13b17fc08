"""What a host adapter needs (TRL, verl, Trinity-RFT, your own loop), beside the API line of :mod:`flexkit`.

A host declares what it honours of a pipeline as a :class:`HostSupport` and calls :func:`check_support` where it
is built (or :func:`unmet_needs` with :func:`selector_needs` when it drives a single selector), so that no part of
a pipeline is silently ignored; it publishes its static support under the ``flexkit.hosts`` entry points for
``flexkit validate --for NAME``. The torch sampler's own, :data:`SAMPLER_SUPPORT`, gives no part: a loop that
gives one declares it with the sampler's ``host`` argument. A host that trains on replayed rows keeps them in the
core's :class:`ReplayBuffer` (the same ``[replay]`` config and checkpointed state as ``flexkit run``'s;
:data:`PadSide` names how its own fields are padded); one that feeds a ``frontier`` guard reports each group's
held-out accuracy under :data:`GUARD_TEMPLATE`, pooled by the columns :func:`guard_columns` names and labelled by
:func:`group_label`. A host that reads its own copy of the rows checks it is the tasksets' rows in the same order
(:func:`check_rows_line_up`; the torch sampler does when given its dataset).
"""

from __future__ import annotations

from flexkit.integrations._rows import check_rows_line_up
from flexkit.integrations._support import SAMPLER_SUPPORT
from flexkit.pipeline._guard_groups import (
    ACCURACY,
    GUARD_TEMPLATE,
    GroupColumn,
    group_label,
    guard_columns,
    text_columns,
)
from flexkit.pipeline._support import (
    PARTS,
    HostSupport,
    Need,
    check_support,
    pipeline_needs,
    selector_needs,
    unmet_needs,
)
from flexkit.sample._batch import PadSide
from flexkit.sample._replay import REPLAY_AGE, REPLAY_KEY, ReplayBuffer

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "PARTS", "REPLAY_AGE", "REPLAY_KEY", "SAMPLER_SUPPORT", "GroupColumn",
           "HostSupport", "Need", "PadSide", "ReplayBuffer", "check_rows_line_up", "check_support", "group_label",
           "guard_columns", "pipeline_needs", "selector_needs", "text_columns", "unmet_needs"]
