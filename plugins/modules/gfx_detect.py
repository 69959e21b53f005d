#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Ansible module: find the host's AMD GPUs and the ROCm environment they need.

Read-only. Sources, in order:

1. the kernel's KFD topology, ``<root>/class/kfd/kfd/topology/nodes/<n>/properties``: one
   ``name value`` line per property (drivers/gpu/drm/amd/amdkfd/kfd_topology.c, node_show);
2. when KFD shows no GPU (amdgpu not loaded yet): ``<root>/bus/pci/devices/*/`` display
   controllers with vendor 0x1002, identified through the PCI id table the role passes in;
3. when that directory is missing too and ``<root>`` is the live ``/sys``: ``lspci -nn -D``.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gfx_detect
short_description: Detect AMD GPUs and the ROCm environment variables they need
description:
  - Reads the KFD topology under I(sysfs_root) (CPU nodes skipped), or AMD display devices on the
    PCI bus when the kernel driver is not loaded, and returns one entry per GPU with its gfx
    target and what the role's tables say about it.
  - Plans C(HSA_OVERRIDE_GFX_VERSION) and C(ROCR_VISIBLE_DEVICES) for the given mode and reports a
    conflict when two visible GPUs would need different overrides.
  - Never changes the host.
options:
  sysfs_root:
    description: Where sysfs is mounted (a copied tree in tests and chroots).
    type: path
    default: /sys
  targets:
    description: gfx target -> {override, usable, igpu, note} (the role's vars table).
    type: dict
    required: true
  pci_ids:
    description: PCI device id (4 lowercase hex digits) -> {gfx, name}.
    type: dict
    default: {}
  mode:
    description: auto plans from the table, manual uses I(version), off plans nothing.
    type: str
    choices: [auto, manual, "off"]
    default: auto
  version:
    description: The override for manual mode, major.minor.stepping.
    type: str
    default: ""
  hide_igpu:
    description: Hide integrated GPUs when a usable discrete GPU is present.
    type: bool
    default: true
  native:
    description:
      - Release series of AMD's Core SDK (C(10.0)) -> the gfx targets it ships code for (the
        support catalog's). When the host's installed ROCm (read under I(rocm_root)) is such a
        release, a GPU it has code for needs no C(HSA_OVERRIDE_GFX_VERSION), whatever
        I(targets) says of the legacy line.
    type: dict
    default: {}
  rocm_root:
    description: Where the installed ROCm is read (a copied tree in tests).
    type: path
    default: /
  lspci:
    description:
      - Whether to fall back to C(lspci -nn -D) when sysfs has no PCI devices directory.
      - auto does so only when I(sysfs_root) is the live /sys.
    type: str
    choices: [auto, always, never]
    default: auto
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Detect the GPUs
  gfx_detect:
    sysfs_root: /sys
    targets: "{{ __gfx_override_targets }}"
    pci_ids: "{{ __gfx_override_pci_ids }}"
  register: detected
"""

RETURN = r"""
gpus:
  description: One entry per AMD GPU, in ROCm enumeration order.
  returned: always
  type: list
  elements: dict
source:
  description: kfd, pci, lspci or none.
  returned: always
  type: str
kfd_present:
  description: Whether the KFD topology directory exists.
  returned: always
  type: bool
environment:
  description: Variables to write (empty when nothing is needed or on conflict).
  returned: always
  type: dict
notes:
  description: Per variable, the lines explaining why it is set.
  returned: always
  type: dict
conflict:
  description: Why no single override fits the visible GPUs; empty when there is none.
  returned: always
  type: str
visible:
  description: PCI addresses of the GPUs ROCm is to use.
  returned: always
  type: list
  elements: str
hidden:
  description: PCI addresses of the GPUs hidden from ROCm.
  returned: always
  type: list
  elements: str
summary:
  description: Human-readable lines about each GPU and the plan.
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import rocm_installed

AMD_VENDOR_ID = 0x1002
# PCI base class + subclass of devices that can be compute GPUs: VGA, 3D controller, other
# display controller (Instinct MI100/MI200), processing accelerator (Instinct MI300).
GPU_PCI_CLASSES = frozenset({0x0300, 0x0302, 0x0380, 0x1200})
KFD_NODES = ("class", "kfd", "kfd", "topology", "nodes")
VERSION_RE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})")
GFX_NAME_RE = re.compile(r"^gfx(\d+)([0-9a-f])([0-9a-f])$")
LSPCI_LINE_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{4,}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-9a-f]{2})\.(?P<fn>[0-7])"
    r"\s.*?\[(?P<cls>[0-9a-f]{4})\]:\s"
)
LSPCI_IDS_RE = re.compile(r"\[([0-9a-f]{4}):([0-9a-f]{4})\]")


# ---------------------------------------------------------------- decoding


def decode_gfx_target_version(value: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as gfxNNN, "" for none.

    Minor and stepping are written in hex, one digit each: 90010 -> gfx90a, 100301 -> gfx1031.
    """
    if value <= 0:
        return ""
    major, rest = divmod(value, 10000)
    minor, stepping = divmod(rest, 100)
    if minor > 15 or stepping > 15:
        return ""
    return f"gfx{major}{minor:x}{stepping:x}"


def gfx_native_version(gfx: str) -> str:
    """The major.minor.stepping a gfx target has natively: gfx1030 -> 10.3.0, gfx90a -> 9.0.10."""
    match = GFX_NAME_RE.match(gfx)
    if not match:
        return ""
    return f"{int(match[1])}.{int(match[2], 16)}.{int(match[3], 16)}"


def valid_override(value: str) -> bool:
    """Whether libhsakmt accepts the value: %u.%u.%u, major <= 63, minor and stepping <= 255."""
    match = VERSION_RE.fullmatch(value)
    if not match:
        return False
    major, minor, stepping = (int(part) for part in match.groups())
    return major <= 63 and minor <= 255 and stepping <= 255


# Control characters would end a comment line in the files the role writes and start a line
# of their own there; the tables' text lands in those comments.
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def table_problems(targets: dict, pci_ids: dict) -> list[str]:
    """Entries of the merged tables that must not reach the environment files."""
    problems = []
    for gfx, entry in targets.items():
        override = str((entry or {}).get("override", ""))
        if override and not valid_override(override):
            problems.append(f"targets.{gfx}.override {override!r} is not major.minor.stepping.")
        for key, value in (entry or {}).items():
            if isinstance(value, str) and CONTROL_RE.search(value):
                problems.append(f"targets.{gfx}.{key} {value!r} holds a control character.")
    for pci_id, entry in pci_ids.items():
        for key, value in (entry or {}).items():
            if isinstance(value, str) and CONTROL_RE.search(value):
                problems.append(f"pci_ids.{pci_id}.{key} {value!r} holds a control character.")
    return problems


def pci_address(domain: int, location_id: int) -> str:
    """KFD's domain and location_id (bus << 8 | device << 3 | function) as 0000:03:00.0."""
    bus, devfn = divmod(location_id, 256)
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7:x}"


def parse_properties(text: str) -> dict[str, int | str]:
    """A KFD properties file: one ``name value`` per line, values decimal (a few are strings)."""
    props: dict[str, int | str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        name, value = parts
        try:
            props[name] = int(value)
        except ValueError:
            props[name] = value
    return props


def parse_lspci(text: str) -> list[dict[str, str]]:
    """AMD GPU candidates from ``lspci -nn [-D]``: address, class, vendor and device ids."""
    found = []
    for line in text.splitlines():
        match = LSPCI_LINE_RE.match(line.strip().lower())
        if not match:
            continue
        ids = LSPCI_IDS_RE.findall(line.lower())
        if not ids:
            continue
        vendor, device = ids[-1]
        if int(vendor, 16) != AMD_VENDOR_ID or int(match["cls"], 16) not in GPU_PCI_CLASSES:
            continue
        domain = match["domain"] or "0000"
        found.append(
            {
                "address": f"{domain}:{match['bus']}:{match['dev']}.{match['fn']}",
                "class": match["cls"],
                "device": device,
            }
        )
    return found


# ---------------------------------------------------------------- reading


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


def _node_dirs(nodes_dir: str) -> list[tuple[int, str]]:
    entries = [name for name in os.listdir(nodes_dir) if name.isdigit()]
    return sorted((int(name), os.path.join(nodes_dir, name)) for name in entries)


def read_kfd(root: str, warnings: list[str]) -> list[dict] | None:
    """GPU nodes of the KFD topology in node order; None when there is no topology."""
    nodes_dir = os.path.join(root, *KFD_NODES)
    if not os.path.isdir(nodes_dir):
        return None
    nodes = []
    for node_id, path in _node_dirs(nodes_dir):
        try:
            props = parse_properties(_read(os.path.join(path, "properties")))
        except OSError as err:
            # A GPU this process may not use (device cgroup) answers EPERM.
            warnings.append(f"KFD node {node_id}: cannot read its properties ({err.strerror})")
            continue
        simd_count = props.get("simd_count", 0)
        vendor = props.get("vendor_id", 0)
        if not isinstance(simd_count, int) or simd_count <= 0:
            continue  # a CPU node
        if vendor not in (0, AMD_VENDOR_ID):
            continue
        nodes.append({"node_id": node_id, "props": props})
    return nodes


def read_pci(root: str) -> list[dict[str, str]] | None:
    """AMD GPU candidates on the PCI bus; None when the devices directory is missing."""
    devices_dir = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(devices_dir):
        return None
    found = []
    for address in sorted(os.listdir(devices_dir)):
        path = os.path.join(devices_dir, address)
        try:
            vendor = int(_read(os.path.join(path, "vendor")).strip(), 16)
            pci_class = int(_read(os.path.join(path, "class")).strip(), 16)
            device = int(_read(os.path.join(path, "device")).strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor != AMD_VENDOR_ID or (pci_class >> 8) not in GPU_PCI_CLASSES:
            continue
        found.append(
            {"address": address, "class": f"{pci_class >> 8:04x}", "device": f"{device:04x}"}
        )
    return found


# ---------------------------------------------------------------- describing


def describe(
    gfx: str, device_id: str, targets: dict, pci_ids: dict, *, apu_node: bool = False
) -> dict:
    """What the tables say about one GPU."""
    pci_entry = pci_ids.get(device_id, {})
    gfx = gfx or pci_entry.get("gfx", "")
    entry = targets.get(gfx) if gfx else None
    info = {
        "gfx_target": gfx,
        "name": pci_entry.get("name", ""),
        "known": entry is not None,
        "override": (entry or {}).get("override", "") or "",
        "usable": bool((entry or {}).get("usable", False)),
        "igpu": apu_node or bool((entry or {}).get("igpu", False)),
        "note": (entry or {}).get("note", ""),
    }
    return info


def gpus_from_kfd(nodes: list[dict], targets: dict, pci_ids: dict, warnings: list[str]) -> list:
    gpus = []
    for index, node in enumerate(nodes):
        props = node["props"]
        version = props.get("gfx_target_version", 0)
        version = version if isinstance(version, int) else 0
        device_id = f"{props.get('device_id', 0):04x}"
        location = props.get("location_id")
        # An old-style APU node carries the CPU cores and the SIMDs together.
        apu_node = props.get("cpu_cores_count", 0) > 0
        gpu = {
            "source": "kfd",
            "node_id": node["node_id"],
            "rocr_index": index,
            "pci_address": pci_address(props.get("domain", 0), location)
            if isinstance(location, int)
            else "",
            "vendor_id": f"{props.get('vendor_id', AMD_VENDOR_ID) or AMD_VENDOR_ID:04x}",
            "device_id": device_id,
            "gfx_target_version": version,
            "simd_count": props.get("simd_count", 0),
            "unique_id": str(props.get("unique_id", 0) or ""),
            # The render node /dev/dri/renderD<minor> (role slurm_health's gres.conf); None
            # when the kernel does not say.
            "render_minor": props["drm_render_minor"]
            if isinstance(props.get("drm_render_minor"), int)
            else None,
        }
        gpu.update(
            describe(
                decode_gfx_target_version(version), device_id, targets, pci_ids, apu_node=apu_node
            )
        )
        if gpu["gfx_target"] and not gpu["known"]:
            gpu["usable"] = True
            gpu["note"] = "not in the role's table: taken as supported natively"
            warnings.append(
                f"{label(gpu)}: the role's table does not list {gpu['gfx_target']}, so no "
                "override is written for it. Add it to gfx_override_targets_extra if it needs one."
            )
        gpus.append(gpu)
    return gpus


def gpus_from_pci(
    found: list[dict], source: str, targets: dict, pci_ids: dict, warnings: list
) -> list:
    gpus = []
    for index, dev in enumerate(found):
        gpu = {
            "source": source,
            "node_id": None,
            "rocr_index": index,
            "pci_address": dev["address"],
            "vendor_id": f"{AMD_VENDOR_ID:04x}",
            "device_id": dev["device"],
            "gfx_target_version": 0,
            "simd_count": 0,
            "unique_id": "",
            "render_minor": None,
        }
        gpu.update(describe("", dev["device"], targets, pci_ids))
        if not gpu["gfx_target"]:
            warnings.append(
                f"{dev['address']}: AMD display device 1002:{dev['device']} is missing from the "
                "role's PCI id table and is ignored. Load amdgpu (KFD) for exact detection, or "
                "add it to gfx_override_pci_ids_extra."
            )
        gpus.append(gpu)
    return gpus


def label(gpu: dict) -> str:
    where = gpu["pci_address"] or f"KFD node {gpu['node_id']}"
    name = f" {gpu['name']}" if gpu["name"] else ""
    return f"{where}{name} ({gpu['gfx_target'] or 'unknown target'})"


# ---------------------------------------------------------------- planning


def plan(gpus: list[dict], mode: str, version: str, hide_igpu: bool) -> dict:
    """The environment for the GPUs: variables, the reasons for each, or a conflict."""
    result = {"environment": {}, "notes": {}, "conflict": "", "visible": [], "hidden": []}
    if mode == "off":
        return result
    usable = [gpu for gpu in gpus if gpu["usable"]]
    discrete = [gpu for gpu in usable if not gpu["igpu"]]
    visible = discrete if hide_igpu and discrete else usable
    hidden = [gpu for gpu in gpus if gpu not in visible]
    result["visible"] = [gpu["pci_address"] for gpu in visible]
    result["hidden"] = [gpu["pci_address"] for gpu in hidden]

    if visible and hidden:
        indices = ",".join(str(gpu["rocr_index"]) for gpu in visible)
        result["environment"]["ROCR_VISIBLE_DEVICES"] = indices
        notes = [f"ROCm sees only GPU {indices} (ROCm's numbering: KFD GPU nodes in order):"]
        for gpu in hidden:
            why = [] if gpu["usable"] else [gpu["note"] or "not usable by ROCm"]
            if gpu["igpu"] and hide_igpu and discrete:
                why.append("an integrated GPU beside a discrete one can crash the runtime")
            notes.append(f"  hides {label(gpu)}: {'; '.join(why)}")
        if any(gpu["source"] != "kfd" for gpu in gpus):
            notes.append(
                "  numbering predicted from PCI order (no KFD yet): rerun after amdgpu loads"
            )
        result["notes"]["ROCR_VISIBLE_DEVICES"] = notes

    if mode == "manual":
        targets = ", ".join(label(gpu) for gpu in visible) or "no detected GPU"
        result["environment"]["HSA_OVERRIDE_GFX_VERSION"] = version
        result["notes"]["HSA_OVERRIDE_GFX_VERSION"] = [
            f"set by hand (gfx_override_mode: manual) for {targets}"
        ]
        return result

    needing = [gpu for gpu in visible if gpu["override"]]
    if not needing:
        return result
    wanted = {}
    for gpu in visible:
        wanted.setdefault(gpu["override"] or gfx_native_version(gpu["gfx_target"]), []).append(gpu)
    if len(wanted) > 1:
        lines = [
            f"  {label(gpu)} needs {value}" + ("" if gpu["override"] else " (its own ISA)")
            for value, group in sorted(wanted.items())
            for gpu in group
        ]
        result["conflict"] = (
            "These GPUs need different HSA_OVERRIDE_GFX_VERSION values, and one global value "
            "cannot serve them all:\n" + "\n".join(lines) + "\n"
            "The per-GPU form HSA_OVERRIDE_GFX_VERSION_<n> exists, but whether <n> counts the "
            "CPU node is reported both ways and unverified on hardware, so this role does not "
            "use it. Either set gfx_override_mode: manual with the gfx_override_version of the "
            "card you will compute on (and pick it per job with ROCR_VISIBLE_DEVICES), or "
            "remove one of the cards."
        )
        result["environment"] = {}
        result["notes"] = {}
        return result
    value = next(iter(wanted))
    result["environment"]["HSA_OVERRIDE_GFX_VERSION"] = value
    result["notes"]["HSA_OVERRIDE_GFX_VERSION"] = [
        f"{label(gpu)}: {gpu['note']}"
        + ("" if gpu["source"] == "kfd" else " (known by its PCI id: amdgpu was not loaded)")
        for gpu in needing
    ]
    return result


# ---------------------------------------------------------------- module


def summarize(gpus: list[dict], source: str, planned: dict) -> list[str]:
    """One line per GPU and one for the plan, for the play's output."""
    if not gpus:
        return [f"No AMD GPU found (looked at: {source if source != 'none' else 'KFD and PCI'})."]
    lines = []
    for gpu in gpus:
        if not gpu["usable"]:
            state = "not usable by ROCm"
        elif gpu["override"]:
            state = f"usable with HSA_OVERRIDE_GFX_VERSION={gpu['override']}"
        else:
            state = "usable as is"
        kind = "integrated" if gpu["igpu"] else "discrete"
        lines.append(f"{label(gpu)}, {kind}, from {gpu['source']}: {state}")
    if planned["conflict"]:
        lines.append("Conflict: no single override fits (see the failure below).")
    else:
        env = " ".join(f"{k}={v}" for k, v in sorted(planned["environment"].items()))
        lines.append(f"Environment to write: {env or 'nothing'}")
    return lines


def detect(root: str, targets: dict, pci_ids: dict, lspci_text: str | None, warnings: list) -> dict:
    nodes = read_kfd(root, warnings)
    if nodes:
        return {
            "source": "kfd",
            "kfd_present": True,
            "gpus": gpus_from_kfd(nodes, targets, pci_ids, warnings),
        }
    found = read_pci(root)
    source = "pci"
    if found is None and lspci_text is not None:
        found, source = parse_lspci(lspci_text), "lspci"
    gpus = gpus_from_pci(found or [], source, targets, pci_ids, warnings)
    gpus = [gpu for gpu in gpus if gpu["gfx_target"]]
    for index, gpu in enumerate(gpus):
        gpu["rocr_index"] = index
    return {"source": source if gpus else "none", "kfd_present": nodes is not None, "gpus": gpus}


def follow_sdk(gpus: list[dict], installed: dict, native: dict) -> None:
    """GPUs the installed Core SDK release ships code for need no override: theirs is dropped
    and the note says why (installed: rocm_installed.probe's answer; native: series -> targets)."""
    release = installed.get("release") if installed.get("line") == "core" else None
    series = ".".join(release.split(".")[:2]) if release else None
    targets = set(native.get(series, [])) if series else set()
    for gpu in gpus:
        if gpu["override"] and gpu["gfx_target"] in targets:
            gpu["override"] = ""
            gpu["usable"] = True
            gpu["note"] = f"native code in the installed ROCm {release} (Core SDK): no override"


def run_lspci(module: AnsibleModule) -> str | None:
    lspci = module.get_bin_path("lspci")
    if not lspci:
        return None
    rc, out, _err = module.run_command([lspci, "-nn", "-D"])
    return out if rc == 0 else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "targets": {"type": "dict", "required": True},
            "pci_ids": {"type": "dict", "default": {}},
            "mode": {"type": "str", "choices": ["auto", "manual", "off"], "default": "auto"},
            "version": {"type": "str", "default": ""},
            "hide_igpu": {"type": "bool", "default": True},
            "lspci": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
            "native": {"type": "dict", "default": {}},
            "rocm_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["mode"] == "manual" and not valid_override(params["version"]):
        module.fail_json(
            msg=f"version {params['version']!r} is not major.minor.stepping (like 10.3.0) "
            "with major <= 63 and minor, stepping <= 255"
        )
    bad = table_problems(params["targets"], params["pci_ids"])
    if bad:
        module.fail_json(msg=" ".join(bad) + " Nothing on this host was changed.")
    root = params["sysfs_root"]
    pci_ids = {str(key).lower().zfill(4): value for key, value in params["pci_ids"].items()}
    warnings: list[str] = []
    lspci_text = None
    use_lspci = params["lspci"] == "always" or (
        params["lspci"] == "auto" and os.path.realpath(root) == "/sys"
    )
    if use_lspci and not os.path.isdir(os.path.join(root, "bus", "pci", "devices")):
        lspci_text = run_lspci(module)
    found = detect(root, params["targets"], pci_ids, lspci_text, warnings)
    installed = rocm_installed.probe(params["rocm_root"]) if params["native"] else {}
    follow_sdk(found["gpus"], installed, params["native"])
    planned = plan(found["gpus"], params["mode"], params["version"], params["hide_igpu"])
    for warning in warnings:
        module.warn(warning)
    module.exit_json(
        changed=False,
        gpus=found["gpus"],
        source=found["source"],
        kfd_present=found["kfd_present"],
        environment=planned["environment"],
        notes=planned["notes"],
        conflict=planned["conflict"],
        visible=planned["visible"],
        hidden=planned["hidden"],
        summary=summarize(found["gpus"], found["source"], planned),
    )


if __name__ == "__main__":
    main()
