"""How much the firewall adds to starting a container.

Measures, on the same engine and image, the median wall time of create -> start -> exit
-> remove for

* bare: the image with ``true`` as entrypoint (what ``docker run --rm IMAGE true`` does),
* sandbox: :func:`git_iterare.sandbox.start` running ``true`` as the agent, behind the
  firewall, with 5 and with 50 allowed domains (dnsmasq resolves lazily, so the number of
  names should barely matter),

and prints the ratios (goal: <= 1.5). Usage::

    python benchmarks/sandbox_start.py [--image git-iterare:latest] [--runs 7] [--json]

The upstream DNS server in the policy is a TEST-NET address that is never contacted
(``true`` looks nothing up).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from git_iterare import sandbox
from git_iterare.sandbox import EgressPolicy, Limits, SandboxSpec
from git_iterare.sandbox.engine_client import client


def bare_run(image: str) -> float:
    """Seconds for create, start, wait and remove of ``true`` without the entrypoint."""
    start = time.perf_counter()
    container = client().containers.create(image, entrypoint=["true"], command=[])
    container.start()
    container.wait()
    container.remove(force=True)
    return time.perf_counter() - start


def sandbox_run(image: str, domains: int, out: Path, index: int) -> tuple[float, int]:
    """Seconds for launch, wait and remove of ``true`` as the agent; and the setup ms."""
    names = [f"d{i}.example.test" for i in range(domains)]
    run = f"bench-{domains}-{index}-{os.getpid()}"
    spec = SandboxSpec(image=image, sidecar_image=image, name=f"itr-sandbox-{run}",
                       command=("true",), out_dir=out / f"{domains}-{index}", run_id=run,
                       repo_path=str(out), policy=EgressPolicy.build(names,
                                                                     dns=["198.51.100.53"]),
                       limits=Limits(cpus=1.0))  # a run's default limits, within any engine
    start = time.perf_counter()
    cid = sandbox.start(spec)
    code = sandbox.wait(cid, timeout=60)
    sandbox.remove(run, str(out))
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"sandbox exited {code}")
    status = json.loads((spec.out_dir / "status.json").read_text())
    return elapsed, int(status["setup_ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--domains", type=int, nargs="+", default=[5, 50],
                        help="allowlist sizes to measure")
    args = parser.parse_args(argv)
    bare_run(args.image)  # warm caches
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="iterare-sandbox-bench-") as tmp:
        bare = [bare_run(args.image) for _ in range(args.runs)]
        results["bare"] = {"median_s": statistics.median(bare)}
        for domains in args.domains:
            runs = [sandbox_run(args.image, domains, Path(tmp), i) for i in range(args.runs)]
            median = statistics.median(r[0] for r in runs)
            results[f"sandbox_{domains}"] = {
                "median_s": median,
                "setup_ms_median": statistics.median(r[1] for r in runs),
                "ratio": median / results["bare"]["median_s"],
            }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"bare docker run (true): {results['bare']['median_s'] * 1000:.0f} ms")
        for domains in args.domains:
            r = results[f"sandbox_{domains}"]
            print(f"sandbox, {domains} domains: {r['median_s'] * 1000:.0f} ms "
                  f"(entrypoint set-up {r['setup_ms_median']:.0f} ms), ratio {r['ratio']:.2f}")
    worst = max(results[f"sandbox_{d}"]["ratio"] for d in args.domains)
    return 0 if worst <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
