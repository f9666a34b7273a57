#!/usr/bin/env python3
"""Runs NVIDIA Dynamo's own indexer tests on flash-indexer, through flash-indexer-dynamo.

The published source of `dynamo-kv-router` (the version this workspace resolves) is copied from
the cargo registry into target/dynamo-suite/, and changed in four ways only:

1. the bridge (dynamo/src) is compiled into the copy as the module `flash_indexer_dynamo`, with
   `extern crate self as dynamo_kv_router`, so that it sees the copy's types as its own (Dynamo's
   tests are unit tests: they can only run inside the crate);
2. `src/indexer/tests.rs`: every rstest template over indexer variants gains the variants
   `flash_positional`, `flash_array` and `flash_radix`: `ThreadPoolIndexer<FlashIndexer<_>>`
   over each layout, built exactly where Dynamo builds `ThreadPoolIndexer<CRTC>` (same threads,
   block size, metrics and pruning);
3. `src/indexer/concurrent_radix_tree_compressed/tests.rs`, the tests of Dynamo's default
   backend (CRTC), is compiled again once per layout (`flash_positional` ... modules beside it),
   with `ConcurrentRadixTreeCompressed` shadowed by a shim over our backend. The shim gives the
   tests' direct calls their meaning in our contract (apply an event and report the worker's
   block count as its "lookup" size; match; cleanup is a no-op, as our index reclaims its own
   memory). Statements that assert CRTC's internal tree shape (edge counts, edge lengths,
   topology: our contract has no edges) are taken out, and counted; everything else each test
   asserts still runs (the shim panics if a shape is read anywhere else). The tests that reach
   into CRTC's node structures (EXCLUDED_CRTC_TESTS) cannot compile against any other backend
   and are listed as not run;
4. one test elsewhere in the crate reads a file of Dynamo's monorepo that the published crate
   does not ship; its `include_str!` is replaced by an empty string so the test binary builds
   (that test is not run).

Then the templated tests and the CRTC tests run for our variants (with Dynamo's `metrics` feature, which its
metrics tests need), and every result is checked against
expected-failures.txt, which names each test expected to fail with the clause of our contract
that explains it. Exit status 1 on any other failure, on an expected failure that passes, or on
a listed test that did not run; the table of results is printed either way.

    python3 dynamo/suite/run_dynamo_suite.py [--list]
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


# CRTC tests that call into CRTC's node structures (removal of a node group, shared per-worker
# lookups of nodes): they cannot be compiled against another backend.
EXCLUDED_CRTC_TESTS = {
    "batched_remove_processes_hashes_moved_by_split_before_restore":
        "drives CRTC's removal of a group of hashes inside one tree node (apply_removed_group)",
    "batched_remove_falls_back_when_all_grouped_hashes_move_before_restore":
        "drives CRTC's removal of a group of hashes inside one tree node (apply_removed_group)",
    "successful_repair_does_not_restore_scrubbed_other_worker_entries":
        "compares CRTC's per-worker lookups of tree nodes by pointer",
    "stale_scan_cannot_commit_after_split":
        "walks CRTC's nodes from its root and inserts through its internal store path",
    "tail_parent_split_before_child_lookup_repairs_to_suffix":
        "walks CRTC's nodes from its root and inserts through its internal store path",
    "stale_tail_cursor_replans_before_descending_same_local_child":
        "walks CRTC's nodes from its root and inserts through its internal store path",
    "split_preserves_high_fanout_children_under_original_suffix":
        "walks CRTC's nodes from its root",
}

CRTC_SHIM = """
// Added by flash-indexer's run_dynamo_suite.py: CRTC's own tests, with CRTC shadowed by a shim
// over flash-indexer's {layout} layout (the tests' `use super::*` brings the real type in by
// glob; this local definition takes precedence).
use crate::flash_indexer_dynamo::{{FlashIndexer, convert}};
use flash_indexer::KvIndex as _;

struct ConcurrentRadixTreeCompressed(FlashIndexer<Box<dyn flash_indexer::KvIndex>>);

/// What the tests read of a worker's "lookup": its size, which in our contract is the worker's
/// block count (blocks held, reachable or not).
struct FlashLookup(usize);

impl FlashLookup {{
    fn len(&self) -> usize {{
        self.0
    }}
}}

impl ConcurrentRadixTreeCompressed {{
    fn new() -> Self {{
        Self(FlashIndexer::from_index(Box::new(flash_indexer::{index}::new())))
    }}

    fn apply_event(
        &self,
        lookup: &mut FxHashMap<WorkerWithDpRank, FlashLookup>,
        event: RouterEvent,
        _counters: Option<&crate::indexer::PreBoundEventCounters>,
    ) -> Result<(), KvCacheEventError> {{
        let event = convert::flash_event(&event);
        let result = self.0.index().apply(&event).map_err(|e| convert::event_error(&e));
        let count = self.0.index().block_count(event.worker);
        lookup.insert(convert::dynamo_worker(event.worker), FlashLookup(count));
        result
    }}

    fn find_matches_impl(&self, sequence: &[LocalBlockHash], early_exit: bool) -> OverlapScores {{
        SyncIndexer::find_matches(&self.0, sequence, early_exit)
    }}

    /// Our index reclaims its own memory: there is nothing to sweep.
    fn run_cleanup_for_test(&self) {{}}

    fn raw_child_edge_count(&self) -> usize {{
        panic!("CRTC's tree shape (edge count) is not part of flash-indexer's contract")
    }}

    fn edge_lengths_for_test(&self) -> Vec<usize> {{
        panic!("CRTC's tree shape (edge lengths) is not part of flash-indexer's contract")
    }}

    fn edge_topology_for_test(&self) -> Vec<EdgeTopologyForTest> {{
        panic!("CRTC's tree shape (topology) is not part of flash-indexer's contract")
    }}
}}

impl SyncIndexer for ConcurrentRadixTreeCompressed {{
    fn worker(
        &self,
        event_receiver: flume::Receiver<WorkerTask>,
        metrics: Option<Arc<KvIndexerMetrics>>,
    ) -> anyhow::Result<()> {{
        self.0.worker(event_receiver, metrics)
    }}

    fn find_matches(&self, sequence: &[LocalBlockHash], early_exit: bool) -> OverlapScores {{
        SyncIndexer::find_matches(&self.0, sequence, early_exit)
    }}

    fn dump_events(&self) -> Option<Vec<RouterEvent>> {{
        SyncIndexer::dump_events(&self.0)
    }}
}}
"""


def remove_test(text, name):
    """Removes the test function `name` (with its attributes) from `text`."""
    match = re.search(r"\n(\s*#\[[^\n]*\]\s*\n)+\s*(async )?fn " + name + r"\(", text)
    if not match:
        sys.exit(f"CRTC tests: no test {name}; has Dynamo's source changed?")
    i = text.index("{", match.end())
    depth = 0
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    return text[:match.start()] + text[i:]


# Calls that read CRTC's tree shape, and the one use of a shape read into a variable.
SHAPE_CALLS = (
    "raw_child_edge_count()",
    "assert_edge_lengths(",
    "edge_topology_for_test()",
    "edge_lengths_for_test()",
    "edge_lengths ==",
)


def drop_shape_assertions(text):
    """Removes each statement that reads CRTC's tree shape; returns the text and their number."""
    out, at, dropped = [], 0, 0
    while True:
        hits = [i for i in (text.find(c, at) for c in SHAPE_CALLS) if i >= 0]
        if not hits:
            out.append(text[at:])
            return "".join(out), dropped
        hit = min(hits)
        # The statement starts after the last `;`, `{` or `}` before the call.
        start = max(text.rfind(c, 0, hit) for c in ";{}") + 1
        if text[start:hit].lstrip().startswith("fn "):
            # The helper itself: leave it (it is no longer called).
            out.append(text[at:hit + 1])
            at = hit + 1
            continue
        depth, i = 0, start
        while not (depth == 0 and text[i] == ";"):
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[at:start])
        at = i + 2 if text[i + 1:i + 2] == "\n" else i + 1
        dropped += 1


def patch_crtc_tests(root):
    crtc = root / "src" / "indexer" / "concurrent_radix_tree_compressed"
    tests = (crtc / "tests.rs").read_text()
    for name in EXCLUDED_CRTC_TESTS:
        tests = remove_test(tests, name)
    tests, dropped = drop_shape_assertions(tests)
    print(f"CRTC tests: {dropped} assertions of CRTC's tree shape taken out", flush=True)
    tests = replace_once(
        tests,
        "type DirectLookup = FxHashMap<WorkerWithDpRank, WorkerLookup>;",
        "type DirectLookup = FxHashMap<WorkerWithDpRank, FlashLookup>;",
        "concurrent_radix_tree_compressed/tests.rs",
    )
    modules = ""
    for variant, index in [("flash_positional", "PositionalIndexer"), ("flash_array", "ArrayIndexer"),
                           ("flash_radix", "RadixIndexer")]:
        layout = variant.removeprefix("flash_")
        (crtc / f"{variant}.rs").write_text(tests + CRTC_SHIM.format(layout=layout, index=index))
        modules += f"#[cfg(test)]\n#[allow(dead_code, unused_imports)]\nmod {variant};\n"
    mod_rs = crtc / "mod.rs"
    mod_rs.write_text(replace_once(mod_rs.read_text(), "#[cfg(test)]\nmod tests;\n",
                                   "#[cfg(test)]\nmod tests;\n" + modules, "concurrent_radix_tree_compressed/mod.rs"))


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
    patch_crtc_tests(root)
    print(f"Dynamo's dynamo-kv-router {version} from {source}, patched in {root}", flush=True)

    env = dict(os.environ, CARGO_TARGET_DIR=str(REPO / "target"))
    run = subprocess.run(
        ["cargo", "test", "--release", "--lib", "--features", "metrics", "--",
         "indexer::tests::", "concurrent_radix_tree_compressed::flash_", "--test-threads", "2"],
        cwd=root, env=env, capture_output=True, text=True,
    )
    results = {}
    for line in run.stdout.splitlines():
        match = RESULT.match(line)
        if not match:
            continue
        name, outcome = match.groups()
        crtc = re.search(r"concurrent_radix_tree_compressed::(flash_\w+?)::", name)
        if crtc:
            variant, group = crtc.group(1), "crtc"
            test = name.split("::")[-1]
        else:
            # rstest names a case of a value list `variant_<n>___<value>__`.
            variant = next((v for v in VARIANTS if name.endswith(f"__{v}__")), None)
            group = "templated"
            test = name.split("::")[-2]
        if variant is None:
            continue
        results[(test, variant)] = (outcome, group)
    if not results:
        sys.stderr.write(run.stdout[-5000:] + run.stderr[-20000:])
        sys.exit("no results of our variants: the patched crate did not build or run")

    expected = expected_failures()
    surprises = []
    counts = {}
    for (test, variant), (outcome, group) in sorted(results.items()):
        count = counts.setdefault((group, variant), {"run": 0, "ok": 0, "expected": 0, "bad": 0})
        count["run"] += 1
        clause = expected.get((test, variant))
        if outcome == "ok" and clause is None:
            count["ok"] += 1
            status = "pass"
        elif outcome == "FAILED" and clause is not None:
            count["expected"] += 1
            status = f"expected failure ({clause})"
        elif outcome == "FAILED":
            status = "UNEXPECTED FAILURE"
        elif outcome == "ok":
            status = "UNEXPECTED PASS (remove it from expected-failures.txt)"
        else:
            status = "ignored by Dynamo"
        if status.startswith("UNEXPECTED"):
            count["bad"] += 1
            surprises.append((test, variant, status))
        if args.list or status.startswith("UNEXPECTED"):
            print(f"{group} {test} [{variant}]: {status}")
    for key in expected:
        if key not in results:
            surprises.append((*key, "listed in expected-failures.txt but did not run"))
            print(f"{key[0]} [{key[1]}]: listed in expected-failures.txt but did not run")

    print()
    print("| Dynamo's tests | variant | run | pass | expected failures | unexpected |")
    print("|---|---|---|---|---|---|")
    titles = {"templated": "indexer/tests.rs (rstest templates)",
              "crtc": "concurrent_radix_tree_compressed/tests.rs"}
    for (group, variant), c in sorted(counts.items(), key=lambda kv: (kv[0][0] != "templated", kv[0][1])):
        print(f"| {titles[group]} | {variant} | {c['run']} | {c['ok']} | {c['expected']} | {c['bad']} |")
    print(f"\nNot run (they reach into CRTC's node structures): {', '.join(EXCLUDED_CRTC_TESTS)}")
    if surprises:
        sys.exit(f"{len(surprises)} unexpected results")
    print("\n0 unexpected results")


if __name__ == "__main__":
    main()
