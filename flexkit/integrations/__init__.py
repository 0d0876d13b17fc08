"""Integrations of flexkit with training libraries.

- :mod:`flexkit.integrations.torch`: :class:`~flexkit.integrations.torch.FlexkitSampler`, a
  ``torch.utils.data.Sampler`` for any map-style dataset whose state torchdata's ``StatefulDataLoader`` saves
  and restores; :mod:`flexkit.integrations.support` holds what it honours in your own loop (``SAMPLER_SUPPORT``,
  without torch, for ``flexkit validate --for sampler``).

Trainer-specific integrations are separate distributions under ``plugins/``: ``flexkit-rft-verl`` (package
``flexkit_verl``) and ``flexkit-rft-trl`` (package ``flexkit_trl``). Nothing here is imported by ``import flexkit``.
"""
