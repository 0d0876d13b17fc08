"""Integrations of flexkit with training libraries.

- :class:`flexkit.FlexkitSampler` (internal module ``_torch``), a ``torch.utils.data.Sampler`` for any map-style
  dataset whose state torchdata's ``StatefulDataLoader`` saves and restores; :data:`flexkit.host.SAMPLER_SUPPORT`
  (internal module ``_support``, without torch) holds what it honours in your own loop, for
  ``flexkit validate --for sampler``;
- :func:`flexkit.pipeline_metrics` and :func:`flexkit.selector_metrics` (internal module ``_host_metrics``): the
  ``flexkit/...`` metrics host adapters log.

Trainer-specific integrations are separate distributions under ``plugins/``: ``flexkit-rft-verl`` (package
``flexkit_verl``) and ``flexkit-rft-trl`` (package ``flexkit_trl``). Nothing here is imported by ``import flexkit``.
"""
