"""flexkit inside Trinity-RFT (https://github.com/modelscope/Trinity-RFT, arXiv:2505.17826), tested on 0.6.0.

- :class:`FlexkitSelector`: any flexkit selector (built-in or from an installed plugin) as a Trinity-RFT data
  selector, chosen in the YAML with ``data_selector.selector_type: flexkit_trinity.FlexkitSelector`` and
  ``kwargs.selector: <flexkit name>``; its whole state travels in Trinity-RFT's explorer checkpoint;
- :func:`check_config` / :class:`FlexkitConfigValidator`: bad parameters raise
  :class:`flexkit.errors.ConfigError` with key paths during Trinity-RFT's ``Config.check_and_update``;
- :class:`FlexkitMonitor`: Trinity-RFT's monitor plus the selectors' ``flexkit/selector/...`` metrics.

Importing the package installs the config validator (:func:`install_validator`).
"""

from flexkit_trinity.config import (
    SELECTOR_KEY,
    SELECTOR_TYPE,
    FlexkitConfigValidator,
    check_config,
    install_validator,
    selector_spec,
)
from flexkit_trinity.metrics import FlexkitMonitor, flexkit_metrics
from flexkit_trinity.selector import FlexkitSelector

__version__ = "0.1.0"

__all__ = [
    "SELECTOR_KEY",
    "SELECTOR_TYPE",
    "FlexkitConfigValidator",
    "FlexkitMonitor",
    "FlexkitSelector",
    "__version__",
    "check_config",
    "flexkit_metrics",
    "install_validator",
    "selector_spec",
]

install_validator()
