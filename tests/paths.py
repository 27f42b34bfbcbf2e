"""Where things are, for every test folder."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
DATA = ROOT / "tests" / "data"
