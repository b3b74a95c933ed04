"""Regenerate ``docs/images/verify_report.png``: the top of the HTML verification report of the
custom-op example with its wrong plugin (docs/verification.md, "HTML report").

Runs ``torchlean-verify examples/custom_op_graph.json --plugin examples/custom_op_plugin_wrong.py
--html ...`` and screenshots the page in headless Chromium down to the end of the first
counterexample. Needs Graphviz (``dot``), Chromium and the ``playwright`` package::

    python3 docs/gen_screenshot.py [--out docs/images/verify_report.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "verify_report.png"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT})")
    args = p.parse_args(argv)
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if shutil.which("dot") is None or chromium is None:
        print("gen_screenshot: needs Graphviz's dot and Chromium (apt-get install graphviz "
              "chromium)", file=sys.stderr)  # fmt: skip
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        proc = subprocess.run(
            [sys.executable, "-m", "verify", "examples/custom_op_graph.json",
             "--plugin", "examples/custom_op_plugin_wrong.py", "--html", str(html), "-q"],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 1 or not html.exists():  # the wrong plugin must be caught
            print(f"gen_screenshot: torchlean-verify exited {proc.returncode}:\n{proc.stderr}",
                  file=sys.stderr)  # fmt: skip
            return 1
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=FLAGS)
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            page.goto(html.as_uri(), wait_until="load")
            bottom = page.evaluate(
                "() => { const r = document.querySelector('#g0-ce-0').getBoundingClientRect();"
                " return r.bottom + scrollY + 12; }"
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(
                path=str(args.out), full_page=True,
                clip={"x": 0, "y": 0, "width": 1000, "height": bottom},
            )  # fmt: skip
            browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
