#!/usr/bin/env python3
"""Runs NVIDIA Dynamo's own indexer tests on flash-indexer, through flash-indexer-dynamo.

The published source of `dynamo-kv-router` (the version this workspace resolves) is copied from
the cargo registry into target/dynamo-suite/, and changed in three ways only:

1. the bridge (dynamo/src) is compiled into the copy as the module `flash_indexer_dynamo`, with
   `extern crate self as dynamo_kv_router`, so that it sees the copy's types as its own (Dynamo's
   tests are unit tests: they can only run inside the crate);
2. `src/indexer/tests.rs`: every rstest template over indexer variants gains the variants
   `flash_positional`, `flash_array` and `flash_radix`: `ThreadPoolIndexer<FlashIndexer<_>>`
   over each layout, built exactly where Dynamo builds `ThreadPoolIndexer<CRTC>` (same threads,
   block size, metrics and pruning);
3. one test elsewhere in the crate reads a file of Dynamo's monorepo that the published crate
   does not ship; its `include_str!` is replaced by an empty string so the test binary builds
   (that test is not run).

Then the templated tests run for our variants (with Dynamo's `metrics` feature, which its
metrics tests need), and every result is checked against
expected-failures.txt, which names each test expected to fail with the clause of our contract
that explains it. Exit status 1 on any other failure, on an expected failure that passes, or on
a listed test that did not run; the table of results is printed either way.

    python3 dynamo/suite/run_dynamo_suite.py [--keep-going] [--list]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VARIANTS = ["flash_positional", "flash_array", "flash_radix"]


def dynamo_source():
    """The registry directory of the dynamo-kv-router this workspace resolves."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--manifest-path", str(REPO / "Cargo.toml")],
        check=True, capture_output=True, text=True,
    ).stdout
    for package in json.loads(out)["packages"]:
        if package["name"] == "dynamo-kv-router":
            return Path(package["manifest_path"]).parent, package["version"]
    sys.exit("dynamo-kv-router is not in this workspace's dependency graph")


def replace_once(text, old, new, where):
    if text.count(old) != 1:
        sys.exit(f"{where}: expected exactly one {old!r} in Dynamo's source; has it changed?")
    return text.replace(old, new)


def patch_cargo_toml(root):
    path = root / "Cargo.toml"
    text = path.read_text()
    text += (
        "\n# Added by flash-indexer's run_dynamo_suite.py: the bridge compiled into this copy.\n"
        f"[dependencies.flash-indexer]\npath = {json.dumps(str(REPO))}\n"
        'default-features = false\nfeatures = ["positional", "array", "radix"]\n'
        "\n[workspace]\n"
    )
    path.write_text(text)


def patch_lib(root):
    path = root / "src" / "lib.rs"
    bridge = REPO / "dynamo" / "src" / "lib.rs"
    path.write_text(
        path.read_text()
        + "\n// Added by flash-indexer's run_dynamo_suite.py.\n"
        + "extern crate self as dynamo_kv_router;\n"
        + f"#[path = {json.dumps(str(bridge))}]\n"
        + "#[allow(missing_docs, unused)]\npub mod flash_indexer_dynamo;\n"
    )
    policy = root / "src" / "scheduling" / "policy_config.rs"
    text = policy.read_text()
    text = re.sub(
        r'include_str!\(\s*"\.\./\.\./\.\./\.\./examples/router/policy-class-queues\.yaml"\s*\)',
        '""', text,
    )
    policy.write_text(text)


# Arms that build our variants where Dynamo builds its own, and the backend they share.
FLASH_BACKEND = '''
// Added by flash-indexer's run_dynamo_suite.py: flash-indexer's layouts, through the bridge.
type FlashBackend =
    crate::flash_indexer_dynamo::FlashIndexer<Box<dyn flash_indexer::KvIndex>>;

fn flash_backend(variant: &str) -> FlashBackend {
    let index: Box<dyn flash_indexer::KvIndex> = match variant {
        "flash_positional" => Box::new(flash_indexer::PositionalIndexer::new()),
        "flash_array" => Box::new(flash_indexer::ArrayIndexer::new()),
        "flash_radix" => Box::new(flash_indexer::RadixIndexer::new()),
        _ => panic!("Unknown flash-indexer variant: {}", variant),
    };
    crate::flash_indexer_dynamo::FlashIndexer::from_index(index)
}
'''


def duplicate_arms(text, variant, new_variant):
    """Gives every `Self::<variant>(index) => ...` arm a twin for `Self::<new_variant>(index)`."""
    marker = f"Self::{variant}(index) =>"
    out, at = [], 0
    while True:
        start = text.find(marker, at)
        if start < 0:
            out.append(text[at:])
            return "".join(out)
        line_start = text.rfind("\n", 0, start) + 1
        indent = text[line_start:start]
        i = start + len(marker)
        while text[i] == " ":
            i += 1
        if text[i] == "{":
            depth, j = 0, i
            while True:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    break
            end = j + (1 if text[j] == "," else 0)
        else:
            depth, j = 0, i
            while not (depth == 0 and text[j] == ","):
                depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[j], 0)
                j += 1
            end = j + 1
        arm = text[start:end]
        twin = arm.replace(f"Self::{variant}(index)", f"Self::{new_variant}(index)", 1)
        out.append(text[at:end] + "\n" + indent + twin)
        at = end


def patch_tests(root):
    path = root / "src" / "indexer" / "tests.rs"
    text = path.read_text()
    where = "src/indexer/tests.rs"
    flash_values = "".join(f', "{v}"' for v in VARIANTS)
    old = '#[values("single", "flat", "flat_binary", "concurrent_compressed")] variant: &str'
    if text.count(old) != 3:
        sys.exit(f"{where}: expected three templates over Dynamo's four variants")
    text = text.replace(old, old.replace('"concurrent_compressed")', f'"concurrent_compressed"{flash_values})'))
    text = replace_once(
        text,
        '#[values("single", "concurrent_compressed")] variant: &str',
        f'#[values("single", "concurrent_compressed"{flash_values})] variant: &str',
        where,
    )
    # make_indexer_with_metrics, then make_approx_indexer: our arms before each catch-all.
    unknown = '        _ => panic!("Unknown variant: {}", variant),\n'
    if text.count(unknown) != 2:
        sys.exit(f"{where}: expected two variant constructors")
    exact = (
        '        v if v.starts_with("flash_") => Box::new(ThreadPoolIndexer::new_with_metrics(\n'
        "            flash_backend(v),\n            4,\n            kv_block_size,\n"
        "            Some(metrics.clone()),\n        )),\n"
    )
    approx = (
        '        v if v.starts_with("flash_") => Box::new(ThreadPoolIndexer::new_with_pruning(\n'
        "            flash_backend(v),\n            4,\n            kv_block_size,\n"
        "            prune_config,\n        )),\n"
    )
    first = text.index(unknown)
    text = text[:first] + exact + text[first:]
    second = text.index(unknown, first + len(exact) + len(unknown))
    text = text[:second] + approx + text[second:]
    # The tree-size tests' own wrapper: a variant over our backend, with the same arms.
    text = replace_once(
        text,
        "    ConcurrentCompressed(ThreadPoolIndexer<ConcurrentRadixTreeCompressed>),\n",
        "    ConcurrentCompressed(ThreadPoolIndexer<ConcurrentRadixTreeCompressed>),\n"
        "    Flash(ThreadPoolIndexer<FlashBackend>),\n",
        where,
    )
    text = replace_once(
        text,
        "Self::ConcurrentCompressed(index) => index.backend().find_matches_impl(&query, false),",
        "Self::ConcurrentCompressed(index) => SyncIndexer::find_matches(index.backend(), &query, false),",
        where,
    )
    text = replace_once(
        text,
        '            _ => panic!("Unknown tree-size test variant: {}", variant),\n',
        '            v if v.starts_with("flash_") => {\n'
        "                Self::Flash(ThreadPoolIndexer::new(flash_backend(v), 4, 4))\n"
        "            }\n"
        '            _ => panic!("Unknown tree-size test variant: {}", variant),\n',
        where,
    )
    start = text.index("impl TreeSizeTestIndexer {")
    end = text.index("\n}\n", start)
    text = text[:start] + duplicate_arms(text[start:end], "ConcurrentCompressed", "Flash") + text[end:]
    text += FLASH_BACKEND
    path.write_text(text)


def expected_failures():
    """{(test, variant): clause} from expected-failures.txt; a variant of `*` means all of ours."""
    expected = {}
    for line in (HERE / "expected-failures.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        names, _, clause = line.partition("#")
        test, variant = names.split()
        for v in VARIANTS if variant == "*" else [variant]:
            expected[(test, v)] = clause.strip()
    return expected


RESULT = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print every result, not only the surprises")
    args = parser.parse_args()

    source, version = dynamo_source()
    root = REPO / "target" / "dynamo-suite" / f"dynamo-kv-router-{version}"
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, root)
    for child in root.rglob("*"):
        child.chmod(child.stat().st_mode | 0o200)
    root.chmod(root.stat().st_mode | 0o200)
    # The workspace's lock file: the same versions as the bridge was built and tested with.
    shutil.copy(REPO / "Cargo.lock", root / "Cargo.lock")
    patch_cargo_toml(root)
    patch_lib(root)
    patch_tests(root)
    print(f"Dynamo's dynamo-kv-router {version} from {source}, patched in {root}", flush=True)

    env = dict(os.environ, CARGO_TARGET_DIR=str(REPO / "target"))
    run = subprocess.run(
        ["cargo", "test", "--release", "--lib", "--features", "metrics", "--", "indexer::tests::", "--test-threads", "2"],
        cwd=root, env=env, capture_output=True, text=True,
    )
    results = {}
    for line in run.stdout.splitlines():
        match = RESULT.match(line)
        if not match:
            continue
        name, outcome = match.groups()
        # rstest names a case of a value list `variant_<n>___<value>__`.
        variant = next((v for v in VARIANTS if name.endswith(f"__{v}__")), None)
        if variant is None:
            continue
        test = name.split("::")[-2]
        results[(test, variant)] = outcome
    if not results:
        sys.stderr.write(run.stdout[-5000:] + run.stderr[-20000:])
        sys.exit("no results of our variants: the patched crate did not build or run")

    expected = expected_failures()
    surprises = []
    counts = {v: {"ok": 0, "expected": 0} for v in VARIANTS}
    for (test, variant), outcome in sorted(results.items()):
        clause = expected.get((test, variant))
        if outcome == "ok" and clause is None:
            counts[variant]["ok"] += 1
            status = "pass"
        elif outcome == "FAILED" and clause is not None:
            counts[variant]["expected"] += 1
            status = f"expected failure ({clause})"
        elif outcome == "FAILED":
            status = "UNEXPECTED FAILURE"
            surprises.append((test, variant, status))
        elif outcome == "ok":
            status = "UNEXPECTED PASS (remove it from expected-failures.txt)"
            surprises.append((test, variant, status))
        else:
            status = "ignored by Dynamo"
        if args.list or status.startswith("UNEXPECTED"):
            print(f"{test} [{variant}]: {status}")
    for key in expected:
        if key not in results:
            surprises.append((*key, "listed in expected-failures.txt but did not run"))
            print(f"{key[0]} [{key[1]}]: listed in expected-failures.txt but did not run")

    print()
    print("| variant | Dynamo's templated tests run | pass | expected failures | unexpected |")
    print("|---|---|---|---|---|")
    for v in VARIANTS:
        ran = sum(1 for (_, variant) in results if variant == v)
        bad = sum(1 for (_, variant, _) in surprises if variant == v)
        print(f"| {v} | {ran} | {counts[v]['ok']} | {counts[v]['expected']} | {bad} |")
    if surprises:
        sys.exit(f"{len(surprises)} unexpected results")
    print("\n0 unexpected results")


if __name__ == "__main__":
    main()
