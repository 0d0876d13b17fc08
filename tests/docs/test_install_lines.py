"""The README's install section is true on the day it is read: torch's CPU build by one documented line on any
machine (the same pin as the main command's), installs from the clone now, and the by-name lines marked as for the
release."""

from __future__ import annotations

import re

from tests.fixtures import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_the_cpu_route_pins_the_torch_of_the_main_command() -> None:
    main = re.search(r"^python3 -m venv \.venv && \.venv/bin/pip install torch==(\S+) &&", README, re.M)
    assert main is not None
    cpu = set(re.findall(rf"pip install torch==(\S+) {re.escape(CPU_INDEX)}", README))
    assert cpu == {main.group(1)}, cpu
    assert f"--no-compile torch=={main.group(1)}" in (ROOT / ".ci" / "wheels").read_text(encoding="utf-8")
    for page in ("walkthrough.md", "integrations/trl.md"):
        assert CPU_INDEX in (ROOT / "docs" / page).read_text(encoding="utf-8"), page


def test_installs_from_the_clone_now_and_by_name_only_after_the_release() -> None:
    section = README.split("**Install.**", 1)[1].split("**What the numbers say**", 1)[0]
    assert "Nothing is released to the package index yet" in section
    for plugin in sorted(p.name for p in (ROOT / "plugins").glob("flexkit-rft-*") if p.name != "flexkit-rft-example"):
        assert re.search(rf"^pip install -e \. -e \"?plugins/{plugin}\b", section, re.M), plugin
    by_name = re.search(r"<!-- skip: next \"([^\"]+)\" -->\n```bash\npip install flexkit-rft flexkit-rft-trl", section)
    assert by_name is not None and "before the 0.1.0 release" in by_name.group(1)
    assert "After the 0.1.0 release, by name" in section
