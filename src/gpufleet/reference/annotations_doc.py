"""``docs/reference/annotations.md``: the labels, annotations and fields the Kubernetes driver
reads and writes, from its tables.

Three tables, each rendered row by row from the code: what gpufleet reads from a pod
(:data:`gpufleet.k8s.translate.pod_fields.FIELDS`, with the parser's expectation and the
refusal a malformed value gets), what it reads from other objects and what it writes
(:data:`gpufleet.k8s.translate.api_keys.READ` / ``WRITTEN``).
"""

from __future__ import annotations

from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.api_keys import READ, WRITTEN
from gpufleet.k8s.translate.pod_fields import FIELDS
from gpufleet.reference.markdown import cell, table

HEADER = f"""# Annotations, labels and fields

Generated from `gpufleet.k8s.translate.pod_fields` and `gpufleet.k8s.translate.api_keys` by
`python -m gpufleet.reference` (`make reference`); do not edit by hand.

gpufleet schedules the pods whose `spec.schedulerName` is `{names.SCHEDULER_NAME}`. Everything it
publishes lives under `gpufleet.io/`; what it reads follows the conventions other components
already publish (NVIDIA's device plugin and GPU Feature Discovery, Karpenter, the coscheduling
plugin, KAI scheduler's `{names.GPU_FRACTION}`), so existing manifests work unchanged.
"""

POD_INTRO = """## Read from pods

A pending pod whose value does not parse stays pending with a `PodScheduled=False` condition and
a `FailedScheduling` Event naming the key, the value and what was expected — it is never placed
as if the key were absent. A field read under several spellings takes the first present, and a
pod whose spellings disagree is refused too. Bound pods are read the same way, a malformed value
as absent.
"""


def _keys(keys: tuple[tuple[str, str], ...]) -> str:
    return "<br>".join(f"{where} `{key}`" for where, key in keys)


def render() -> str:
    out = [HEADER, POD_INTRO]
    out.append(table(
        ("key", "means", "valid value", "example", "absent"),
        [(_keys(f.keys), cell(f.means), cell(f.expected),
          f"`{f.example}`" if f.example is not None else "", cell(f.absent)) for f in FIELDS]))
    out.append("\n## Read from other objects\n")
    out.append(table(
        ("object", "kind", "key", "means", "absent"),
        [(r.on, r.kind, "<br>".join(f"`{k}`" for k in r.keys), cell(r.means), cell(r.absent))
         for r in READ]))
    out.append("\n## Written\n")
    out.append("What gpufleet writes is read back from the API (the last column), so a restart "
               "or a new leader picks up where the last one stopped.\n")
    out.append(table(
        ("object", "kind", "key", "value", "why", "read by"),
        [(w.on, w.kind, f"`{w.key}`", cell(w.value), cell(w.means), cell(w.read_by))
         for w in WRITTEN]))
    return "\n".join(out)
