"""Saves, or loads, an exported program whose custom metadata holds values that JSON
keeps only approximately: an IntEnum, a str-valued Enum, an OrderedDict (also as the
whole custom of the graph), a namedtuple, a defaultdict, an int key and a tuple.
Runs unchanged under any torch (patched 2.5.1 .. 2.15.0, upstream).

usage: export_save_program.py save PATH    (export, torch.export.save to PATH, load it back)
       export_save_program.py load PATH    (read PATH, saved by this or another torch)
Prints JSON on the last line: the torch version; "saved": the custom strings the file
holds (node target, or "<graph>", to string); "read": each of them as this torch's
deserializer reads it (deserialize_metadata, what torch.export.load runs on it); and
"loaded": the custom torch.export.load gives back, or "load_error" when this torch
refuses the file (a file of an older schema major version). Values are given with the
type of every container, key and leaf spelled out.
"""
import collections
import enum
import json
import sys
import zipfile

import torch


class Level(enum.IntEnum):
    LOW = 1


class Mode(str, enum.Enum):
    FAST = "fast"


Point = collections.namedtuple("Point", ["x", "y"])

NODE_CUSTOM = {"level": Level.LOW, "mode": Mode.FAST, "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
               "point": Point(1, 2), "counts": collections.defaultdict(int, {"x": 3}), 3: "int key",
               "mesh": (0, 1)}
GRAPH_CUSTOM = collections.OrderedDict([("stage", Level.LOW), ("points", [Point(0, 1)])])


def typed(value):
    """``value`` with every container, key and leaf type spelled out, as JSON."""
    if isinstance(value, dict):
        return [type(value).__name__, [[typed(k), typed(v)] for k, v in value.items()]]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [typed(v) for v in value]]
    return [type(value).__name__, value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)]


def exported():
    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),), strict=False)
    (linear,) = [n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default]
    linear.meta["custom"] = NODE_CUSTOM
    ep.graph_module.meta["custom"] = GRAPH_CUSTOM
    return ep


def saved_custom_strings(path):
    """The custom strings of the serialized program in the archive at ``path`` (its JSON
    file is named differently across releases: the one holding a graph_module)."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(".json"):
                program = json.loads(archive.read(name))
                if isinstance(program, dict) and "graph_module" in program:
                    break
    graph_module = program["graph_module"]
    found = {node["target"]: node["metadata"]["custom"] for node in graph_module["graph"]["nodes"]
             if "custom" in node["metadata"]}
    if "custom" in graph_module["metadata"]:
        found["<graph>"] = graph_module["metadata"]["custom"]
    return found


def read_by_this_torch(strings):
    from torch._export.serde.serialize import GraphModuleDeserializer

    return {key: typed(GraphModuleDeserializer().deserialize_metadata({"custom": text})["custom"])
            for key, text in strings.items()}


def loaded_customs(path):
    ep = torch.export.load(path)
    found = {f"torch.ops.{n.target}": typed(n.meta["custom"]) for n in ep.graph.nodes if "custom" in n.meta}
    if "custom" in ep.graph_module.meta:
        found["<graph>"] = typed(ep.graph_module.meta["custom"])
    return found


def main(mode, path):
    out = {"torch": torch.__version__}
    if mode == "save":
        torch.export.save(exported(), path)
    out["saved"] = saved_custom_strings(path)
    out["read"] = read_by_this_torch(out["saved"])
    try:
        out["loaded"] = loaded_customs(path)
    except Exception as e:  # noqa: BLE001 - reported, the test decides
        out["load_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out, sort_keys=True))

if __name__ == "__main__":
    main(*sys.argv[1:])
