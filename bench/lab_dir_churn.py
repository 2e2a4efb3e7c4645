"""What making a lab's files costs in a parent that spreads its subdirectories, and in one
that does not, side by side.

Each round makes a lab-like directory of empty files (a data dir copy is some 1,300
files) in each of two sibling parents, one marked as pglab marks labs/ and templates/
(paths.spread_subdirs, chattr +T) and one plain, then removes both; the rounds alternate
which parent goes first. Prints the kernel CPU per file made in each and their ratio.
On an ext4 without a journal the plain parent's block group fills with inodes deleted in
the last hours, which a new file's inode search skips one by one; elsewhere the two
sides should come out alike.

    python bench/lab_dir_churn.py [--where /tmp] [--rounds 20] [--files 1300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pglab.paths import spread_subdirs


def one_lab(parent: Path, index: int, files: int) -> float:
    """Kernel and user CPU seconds per file to make `files` empty files in a new lab dir
    under `parent`; the dir is removed after."""
    # a new name each time, as a run id is: ext4 starts its search for a spread
    # directory's group from a hash of its name
    lab = parent / f"lab{index}-{os.urandom(4).hex()}" / "data"
    lab.mkdir(parents=True)
    start = time.process_time()
    for n in range(files):
        os.close(os.open(lab / f"f{n}", os.O_CREAT | os.O_WRONLY, 0o600))
    spent = time.process_time() - start
    shutil.rmtree(lab.parent)
    return spent / files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--where", default=tempfile.gettempdir())
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=1300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pglab-churn-", dir=args.where))
    try:
        spread, plain = root / "spread", root / "plain"
        spread.mkdir()
        plain.mkdir()
        spread_subdirs(spread)
        costs: dict[str, list[float]] = {"spread": [], "plain": []}
        for index in range(args.rounds):
            order = [("spread", spread), ("plain", plain)]
            for name, parent in order if index % 2 == 0 else order[::-1]:
                costs[name].append(one_lab(parent, index, args.files))
        us = {name: statistics.median(values) * 1e6 for name, values in costs.items()}
        print(f"{args.rounds} labs of {args.files} files under {args.where}: "
              f"median CPU per file made, spread {us['spread']:.1f} us, "
              f"plain {us['plain']:.1f} us, plain/spread {us['plain'] / us['spread']:.1f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
