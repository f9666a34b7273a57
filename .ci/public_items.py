#!/usr/bin/env python3
"""Lists the public items of flash-indexer from rustdoc's JSON output, one per line, sorted.

Usage: public_items.py target/doc/flash_indexer.json > .ci/public-api.txt
CI regenerates the list and fails when it differs from the committed one, so that every change
of the public surface shows up as a diff of .ci/public-api.txt.
"""
import json
import sys


def main(path: str) -> None:
    doc = json.load(open(path))
    index = doc["index"]
    item = lambda i: index.get(str(i))
    out: set[str] = set()

    def name_of(ty) -> str:
        if isinstance(ty, dict) and "resolved_path" in ty:
            return ty["resolved_path"]["path"]
        return "_"

    def impls(prefix: str, ids) -> None:
        for impl_id in ids:
            imp = item(impl_id)
            if imp is None:
                continue
            inner = imp["inner"]["impl"]
            if inner.get("is_synthetic") or inner.get("blanket_impl") is not None:
                continue
            trait = inner.get("trait")
            if trait is None:
                for member in inner["items"]:
                    m = item(member)
                    if m is not None and m["visibility"] == "public":
                        out.add(f"{prefix}::{m['name']} ({next(iter(m['inner']))})")
            else:
                out.add(f"impl {trait['path']} for {prefix}")

    def visit(item_id, prefix: str, seen: set) -> None:
        it = item(item_id)
        if it is None or item_id in seen:
            return
        seen = seen | {item_id}
        kind, inner = next(iter(it["inner"].items()))
        name = it["name"]
        if kind == "use":
            if inner["is_glob"] or inner.get("id") is None:
                return
            target = item(inner["id"])
            if target is None:
                out.add(f"{prefix}::{inner['name']} (re-export of {inner['source']})")
                return
            renamed = dict(target, name=inner["name"])
            index[f"use:{item_id}"] = renamed
            visit(f"use:{item_id}", prefix, seen)
            return
        if it["visibility"] not in ("public", "default"):
            return
        path = f"{prefix}::{name}" if prefix else name
        out.add(f"{path} ({kind})")
        if kind == "module":
            for child in inner["items"]:
                visit(child, path, seen)
        elif kind == "struct":
            fields = inner["kind"].get("plain", {}).get("fields", []) if isinstance(inner["kind"], dict) else []
            for f in fields:
                fi = item(f)
                if fi is not None and fi["visibility"] == "public":
                    out.add(f"{path}::{fi['name']} (field)")
            impls(path, inner["impls"])
        elif kind == "enum":
            for v in inner["variants"]:
                out.add(f"{path}::{item(v)['name']} (variant)")
            impls(path, inner["impls"])
        elif kind == "trait":
            for t in inner["items"]:
                out.add(f"{path}::{item(t)['name']} (trait item)")

    visit(doc["root"], "", set())
    print("\n".join(sorted(out)))


if __name__ == "__main__":
    main(sys.argv[1])
