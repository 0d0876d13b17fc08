"""``FlexkitSampler`` for verl: flexkit's torch sampler plus feedback from a rollout ``DataProto``.

verl 0.9.x builds its training ``StatefulDataLoader`` with ``sampler=train_sampler`` (``RayPPOTrainer``'s
argument) and saves ``train_dataloader.state_dict()`` as ``data.pt`` in every checkpoint; the loader includes
this sampler's ``state_dict()`` (pipeline state and position), so resuming a verl run resumes the curriculum.
Keep ``data.dataloader_num_workers=0`` with adaptive selectors, so the loader does not draw batches before the
feedback of the previous step arrives (earlier verl releases asserted this for curriculum samplers).
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import numpy as np

from flexkit import FeedbackError, Pipeline, RolloutBatch, TasksetScheduler
from flexkit import FlexkitSampler as _TorchSampler
from flexkit.host import HostSupport
from flexkit_verl.dataset import INDEX_KEY, dataset_indices


class FlexkitSampler(_TorchSampler):  # type: ignore[misc]  # flexkit exports it lazily (Any to mypy)
    """The training sampler of a verl ``RayPPOTrainer``, backed by a flexkit pipeline.

    Args:
        source: a :class:`~flexkit.Pipeline` or :class:`~flexkit.TasksetScheduler`.
        data_source: the training dataset (checked against the tasksets' sizes when given).
        index_key: where each sample's dataset index travels (see :class:`~flexkit_verl.IndexedDataset`).
        reward_key: the reward field (default: ``token_level_scores``, else ``rm_scores``), summed over the
            response tokens.
        host: what drives the sampler (:class:`flexkit.host.HostSupport`). Default ``None``: the trainer mixin
            (:class:`~flexkit_verl.FlexkitTrainerMixin`, :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin`)
            checks the pipeline against what its trainer honours when verl builds the dataloader and declares
            itself (:meth:`~flexkit.FlexkitSampler.declare_host`); a sampler no mixin declared refuses, at its first
            batch, every pipeline part that needs more than selection and feedback.

    verl's ``data.train_batch_size`` must equal the pipeline's ``batch_size``.
    """

    def __init__(
        self,
        source: Pipeline | TasksetScheduler,
        data_source: Sized | None = None,
        *,
        index_key: str = INDEX_KEY,
        reward_key: str | None = None,
        host: HostSupport | None = None,
    ) -> None:
        super().__init__(source, data_source, host=host)
        self.index_key = index_key
        self.reward_key = reward_key
        #: Responses fed back so far (``flexkit/run/rollouts``), kept in :meth:`state_dict`; ``None`` after loading
        #: a state saved before they were counted.
        self.rollouts: int | None = 0

    def update(self, batch: Any) -> dict[str, Any]:
        """Feed a rollout ``DataProto`` back (the name of verl's former curriculum-sampler hook).

        Each ``uid`` group (one prompt's responses) becomes one experience with the group's mean reward; a
        group whose samples name different dataset indices is rejected. Returns the selector metrics.
        """
        indices = dataset_indices(batch.non_tensor_batch, self.index_key)
        if "uid" not in batch.non_tensor_batch:
            raise FeedbackError("the batch has no 'uid' field to group responses by prompt")
        uids = batch.non_tensor_batch["uid"]
        fields: dict[str, Any] = {"uid": uids}
        for name in (self.reward_key, "token_level_scores", "rm_scores", "response_mask"):
            if name is not None and name in batch.batch.keys():  # noqa: SIM118 - TensorDict refuses `in`
                fields[name] = batch.batch[name]
        rewards = RolloutBatch.from_dict(fields).sequence_rewards(self.reward_key).double().cpu().numpy()
        return self.update_groups(uids, indices, rewards)

    def update_groups(self, uids: Any, indices: Any, rewards: Any) -> dict[str, Any]:
        """Feed back one reward per response: ``uids`` group the responses of one prompt, ``indices`` are their
        dataset indices, ``rewards`` their sequence rewards. Each group becomes one experience with its mean
        reward; a group whose samples name different dataset indices is rejected. Returns the selector
        metrics (the feedback payload)."""
        uids = np.asarray(uids, dtype=object)
        indices = np.asarray(indices, dtype=np.int64)
        rewards = np.asarray(rewards, dtype=np.float64)
        group, count = RolloutBatch.from_dict({"uid": uids}).group_index("uid")
        sums = np.bincount(group, weights=rewards, minlength=count)
        sizes = np.bincount(group, minlength=count)
        first = np.full(count, -1, dtype=np.int64)
        first[group[::-1]] = indices[::-1]  # the first sample's index of each group
        if (first[group] != indices).any():
            b = int(np.flatnonzero(first[group] != indices)[0])
            raise FeedbackError(f"uid {uids[b]!r} groups samples of dataset indices {int(first[group[b]])} and "
                                f"{int(indices[b])}; one uid must be one prompt")
        payload: dict[str, Any] = self.feedback(first, sums / sizes)
        if self.rollouts is not None:
            self.rollouts += len(indices)
        return payload

    def state_dict(self) -> dict[str, Any]:
        """The torch sampler's state (pipeline, position) and the responses fed back so far."""
        state: dict[str, Any] = {**super().state_dict(), "rollouts": self.rollouts}
        return state

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output (a state without ``rollouts``: the total is unknown, ``None``)."""
        super().load_state_dict(state)
        rollouts = state.get("rollouts")
        self.rollouts = int(rollouts) if rollouts is not None else None
