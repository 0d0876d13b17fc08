"""The plugin registry: the hook specification, the plugin manager, the built-in components' table, and the component
contract (configurable bases, protocols, the ``Trainer`` base)."""
