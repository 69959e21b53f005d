# Copyright: rocmlab contributors
# Apache License 2.0
"""What the frameworks' roles (pytorch_rocm, tensorflow_rocm) install and from where, decided by
pure functions over the roles' tables (their vars/main.yml) and what the host said. The roles'
tasks only read the host, call these, and act on the answer:

  validate -> plan (*_plan: the refusal, or what to install from where) -> framework_venv
  (*_pip: what pip must do, given what the venv has) -> record (*_record: the record, and the
  refusal of a build that cannot use the GPU).

pytorch_rocm_release(releases, version, rocm_version) -> the torch release (X.Y) a host gets
pytorch_rocm_index(releases, version, rocm_version) -> the index name ("rocm6.4") or ""
pytorch_rocm_plan(settings, python) -> {"refusal", "version", "pinned", "release", "rocm",
    "index", "torchvision",
    "requirements" (pip's), "packages" (apt's, source distro), "python_found", "downloads"}
pytorch_rocm_pip(plan, probe) -> {"reasons", "force_reinstall"}
pytorch_rocm_record(plan, probe, gpu_present) -> {"result", "refusal"}

tensorflow_rocm_defaults(releases, rocm_version, amd_base_url) -> {"newest", "find_links"}
tensorflow_rocm_plan(settings, python) -> {"refusal", "version", "pinned", "rocm", "dist", "pin",
    "pin_regex", "pythons", "requirements", "python_found", "downloads"}

A framework's version left empty (the default) follows the ROCm release: the newest framework
release the role's table builds for it (the table the support catalog points to), so that a
change of rocm_repo_version alone moves the frameworks too. A version set is a pin: kept as it
is, and refused, naming the release that would fit, where it has no build for the ROCm release.
tensorflow_rocm_pip(plan, probe) -> {"needed", "reason", "others"}
tensorflow_rocm_record(plan, probe, gpu_present) -> {"result", "refusal"}

PYTHON is the result of running the venv's interpreter with `print('%d.%d.%d' %
sys.version_info[:3])` (rc, stdout, and msg or stderr), or None where it was not run. Every
refusal names the variable, the value and what would work; the first that applies is returned
(the order the role's checks always had), "" when none does. PROBE is what
roles/framework_venv/files/probe.py printed ({} when there was no venv to ask).

A plan's "downloads" is the role's one list of what the host fetches
(plugins/module_utils/downloads.py; the role publishes it as <role>_downloads for the lab cache
and the rollout's preflight): empty when the plan refuses.
"""

from __future__ import annotations

import re

from ansible_collections.rocmlab.rocmlab.plugins.module_utils.downloads import (
    entry,
    pip_mirrors,
    truthy,
)

CREDENTIALS = re.compile(r"://[^/@]*@")


def _masked(text) -> str:
    return CREDENTIALS.sub("://***@", str(text))


def _major_minor(version) -> str:
    return ".".join(str(version).split(".")[:2])


def _listed(names) -> str:
    return ", ".join(str(name) for name in names)


def _release_key(release) -> tuple[int, ...]:
    return tuple(int(part) for part in str(release).split(".") if part.isdigit())


def _python_ran(python) -> tuple[bool, str, str]:
    """(whether the interpreter ran, the version it printed, why it did not run)."""
    python = python or {}
    if python.get("rc") != 0:
        why = python["msg"] if "msg" in python else python.get("stderr", "")
        return False, "", str(why)
    version = str(python.get("stdout", "")).strip()
    return True, version, ""


# --- PyTorch ------------------------------------------------------------------------------


def pytorch_rocm_built_for(releases: dict, rocm_version) -> list[str]:
    """The torch releases (X.Y) the table builds for this ROCm release, oldest first."""
    rocm = _major_minor(rocm_version)
    built = [name for name, row in (releases or {}).items() if rocm in (row.get("rocm") or {})]
    return sorted(built, key=_release_key)


def pytorch_rocm_release(releases: dict, version, rocm_version) -> str:
    """The torch release (X.Y) a host gets: that of VERSION where one is set (a pin), else the
    newest release the table builds for this ROCm release ("" where it builds none)."""
    if str(version or "").strip():
        return _major_minor(str(version).strip())
    return (pytorch_rocm_built_for(releases, rocm_version) or [""])[-1]


def pytorch_rocm_index(releases: dict, version, rocm_version) -> str:
    """The wheel index (under pytorch_rocm_index_base_url) of this torch and ROCm release (VERSION
    empty: the torch release that follows it), or "" where the table has none."""
    row = (releases or {}).get(pytorch_rocm_release(releases, version, rocm_version)) or {}
    return str((row.get("rocm") or {}).get(_major_minor(rocm_version), ""))


def _nothing_to_follow(role: str, framework: str, rocm: str, newest: tuple[str, str]) -> str:
    """The refusal where ROLE's version follows ROCm release ROCM and the role's table builds no
    FRAMEWORK for it; NEWEST: the newest ROCm release the table builds for, and its release."""
    core = (
        " AMD's Core SDK releases (7.14 on) ship their frameworks as TheRock's own wheels, which"
        " rocmlab does not install."
        if _release_key(rocm) > _release_key(newest[0])
        else ""
    )
    return (
        f"{role}_version: no {framework} in the table (roles/{role}/vars/main.yml) is built for"
        f" ROCm {rocm} ({role}_rocm_version, which follows rocm_repo_version by default), so"
        f" there is none to follow.{core} The newest ROCm release the table has {framework} for"
        f" is {newest[0]} ({framework} {newest[1]})."
    )


def pytorch_rocm_plan(settings: dict, python: dict | None = None) -> dict:
    """What pytorch_rocm installs, or why it refuses to.

    SETTINGS: source (pip|distro), version ("": follow rocm_version), rocm_version, torchvision
    (bool), index_url, find_links, index_base_url, python (the interpreter's path), venv, releases
    (vars/main.yml's table), distro_packages ({torch, torchvision} or None where the distribution
    packages no PyTorch), distribution ("Debian 12.8"). PYTHON: see the module's doc (pip only)."""
    releases = settings["releases"]
    pinned = str(settings["version"] or "").strip()
    source = settings["source"]
    release = pytorch_rocm_release(releases, pinned, settings["rocm_version"])
    # Not pinned: the newest patch release of the torch release that follows ROCm.
    version = pinned or (f"{release}.*" if release else "")
    rocm = _major_minor(settings["rocm_version"])
    row = releases.get(release) or {}
    index = pytorch_rocm_index(releases, version, settings["rocm_version"])
    torchvision = str(row.get("torchvision", ""))
    wants_torchvision = truthy(settings["torchvision"])
    requirements = [f"torch=={version}"] + (
        [f"torchvision=={torchvision}.*"] if wants_torchvision else []
    )
    plan = {
        "refusal": "",
        "source": source,
        "version": version,
        "pinned": bool(pinned),
        "release": release,
        "rocm": rocm,
        "rocm_version": str(settings["rocm_version"]),
        "index": index,
        "index_base_url": str(settings["index_base_url"]),
        "index_url": str(settings["index_url"]),
        "find_links": str(settings["find_links"]),
        "torchvision": torchvision,
        "wants_torchvision": wants_torchvision,
        "requirements": requirements,
        "packages": [],
        "python_found": None,
        "downloads": [],
    }

    def refuse(message: str) -> dict:
        plan["refusal"] = message
        return plan

    if not pinned and source == "pip" and not release:
        newest = max((r for row in releases.values() for r in row["rocm"]), key=_release_key)
        return refuse(
            _nothing_to_follow(
                "pytorch_rocm", "torch", rocm, (newest, pytorch_rocm_release(releases, "", newest))
            )
            + f' Set pytorch_rocm_rocm_version: "{newest}" (docs/core-sdk.md: the wheels bring'
            " their own ROCm libraries), or leave PyTorch out of the run (--skip-tags"
            " pytorch_rocm)."
        )
    if pinned and release not in releases:
        return refuse(
            f"pytorch_rocm_version: torch {pinned} is not in the table of ROCm builds"
            f" (roles/pytorch_rocm/vars/main.yml). Known releases: {_listed(releases)}. Leave"
            " pytorch_rocm_version empty to get the newest torch built for the ROCm release."
        )
    if source == "pip":
        if rocm not in row["rocm"]:
            others = pytorch_rocm_built_for(releases, rocm)
            fits = (
                f"Torch releases built for ROCm {rocm}: {_listed(others)}; set"
                f' pytorch_rocm_version: "" to follow the ROCm release (torch {others[-1]}), or'
                if others
                else f"No torch in the table is built for ROCm {rocm}; set"
            )
            return refuse(
                f'pytorch_rocm_version "{pinned}" does not fit pytorch_rocm_rocm_version'
                f' "{settings["rocm_version"]}" (which follows rocm_repo_version by default):'
                f" torch {release} is built for ROCm {_listed(row['rocm'])}. {fits}"
                f" pytorch_rocm_rocm_version to a ROCm release torch {release} is built for."
            )
        if not plan["index_url"] and not plan["find_links"]:
            return refuse(
                "pytorch_rocm_index_url and pytorch_rocm_find_links are both empty: set at least"
                " one (PyTorch's ROCm index such as"
                f" {plan['index_base_url'].rstrip('/')}/rocm6.4, a lab mirror of it, or a"
                " wheelhouse)."
            )
        path = str(settings["python"])
        ran, found, why = _python_ran(python)
        if not ran:
            return refuse(
                f"pytorch_rocm_python: {path} does not run ({why}). Install python3 or point"
                " pytorch_rocm_python at an interpreter."
            )
        pyver = _major_minor(found)
        if pyver not in row["python"]:
            others = [name for name, r in releases.items() if pyver in r["python"]]
            distro = settings.get("distro_packages")
            return refuse(
                f"pytorch_rocm_version: torch {release} has no wheels for Python {found}"
                f" ({path}); its wheels are for Python {_listed(row['python'])}. torch releases"
                f" with wheels for Python {pyver}: {_listed(others) or 'none in the table'}. "
                + (
                    f"This distribution packages PyTorch itself ({distro['torch']}, a CPU"
                    " build): pytorch_rocm_source: distro. "
                    if distro
                    else ""
                )
                + "Or set pytorch_rocm_python to an interpreter of a supported version."
            )
        plan["python_found"] = {
            "path": path,
            "version": found,
            "torch": release,
            "wheels_for": list(row["python"]),
        }
        # From the configured index and wheelhouse; upstream: where this host would fetch its
        # wheels without a lab cache (role lab_cache fetches them once for its clients there).
        plan["downloads"] = [
            entry(
                "wheels",
                "PyTorch wheels",
                mirrors=pip_mirrors("PyTorch", plan["index_url"], plan["find_links"], "torch"),
                upstream={"index_url": f"{plan['index_base_url']}/{index}", "find_links": ""},
                requirements=requirements,
                python=pyver,
                path=settings["venv"],
                space="venvs",
            )
        ]
    else:
        distro = settings.get("distro_packages")
        if not distro:
            return refuse(
                f'pytorch_rocm_source: "distro" is not available on {settings["distribution"]}:'
                " no packaged PyTorch is known there (known: Debian 13, python3-torch). Use"
                " pytorch_rocm_source: pip."
            )
        plan["packages"] = [distro["torch"]] + (
            [distro["torchvision"]] if wants_torchvision else []
        )
        plan["downloads"] = [entry("apt", "PyTorch packages", requirements=plan["packages"])]
    return plan


def _is_version(version: str, wanted: str) -> bool:
    """Whether VERSION is WANTED: X.Y.Z exactly, or any X.Y.Z of X.Y.* (pip's == prefix match)."""
    if wanted.endswith(".*"):
        return _major_minor(version) == wanted[:-2]
    return version == wanted


def pytorch_rocm_pip(plan: dict, probe: dict | None, require_rocm_build) -> dict:
    """Why pip must run in the venv (empty: it need not), and whether it reinstalls torch."""
    dists = (probe or {}).get("dists") or {}
    torch = dists.get("torch")
    torchvision = str(dists.get("torchvision") or "")
    reasons = []
    if not torch:
        reasons.append("no torch")
    elif not _is_version(str(torch).split("+", maxsplit=1)[0], plan["version"]):
        reasons.append(f"torch {torch} instead of {plan['version']}")
    if plan["wants_torchvision"] and _major_minor(torchvision) != plan["torchvision"]:
        reasons.append(f"torchvision {torchvision or 'missing'} instead of {plan['torchvision']}.*")
    rebuild = truthy(require_rocm_build) and bool(torch) and "+rocm" not in str(torch)
    if rebuild:
        reasons.append(f"torch {torch} is not a ROCm build")
    # A ROCm build of the right version, but for another ROCm (the host's release changed): pip
    # takes 2.9.1+rocm6.4 as torch==2.9.1, so only a forced reinstall puts the other build in.
    built_for = str(torch).partition("+rocm")[2] if torch else ""
    if built_for and _major_minor(built_for) != plan["rocm"]:
        reasons.append(
            f"torch {torch} is built for ROCm {_major_minor(built_for)}, not ROCm {plan['rocm']}"
        )
        rebuild = True
    return {"reasons": reasons, "force_reinstall": rebuild}


def pytorch_rocm_record(
    plan: dict, probe: dict, gpu_present, require_rocm_build, interpreter: str, venv: str
) -> dict:
    """The record of what the interpreter has (fact pytorch_rocm_result, and its JSON file), and
    the refusal of a torch that cannot use an AMD GPU ("" when none applies)."""
    pip = plan["source"] == "pip"
    hip, cuda = probe.get("hip_version"), probe.get("cuda_version")
    result = {
        "source": plan["source"],
        "venv": venv if pip else None,
        "python": interpreter,
        "python_version": probe.get("python"),
        "torch_version": probe.get("torch_version"),
        # What was asked: a pin (X.Y.Z), or X.Y.* where torch follows the ROCm release.
        "torch_requested": plan["version"] if pip else None,
        "torchvision_version": (probe.get("dists") or {}).get("torchvision"),
        "hip_version": hip,
        "cuda_version": cuda,
        "cuda_available": probe.get("cuda_available"),
        "gpu_present": bool(gpu_present),
        "build": "rocm" if hip else ("cuda" if cuda else "cpu"),
        "index_url": _masked(plan["index_url"]) if pip else "",
        "find_links": _masked(plan["find_links"]) if pip else "",
    }
    refusal = ""
    if not truthy(require_rocm_build):
        pass
    elif result["build"] != "rocm":
        came_from = (
            f"It came from {result['index_url'] or 'no index'}"
            + (f" + {result['find_links']}" if result["find_links"] else "")
            + "; point pytorch_rocm_index_url at PyTorch's ROCm index"
            f" ({plan['index_base_url']}/{plan['index']}) or the wheelhouse at ROCm wheels. "
            if pip
            else "The distribution packages PyTorch without ROCm: use pytorch_rocm_source: pip. "
        )
        refusal = (
            f"pytorch_rocm: {interpreter} has torch {result['torch_version']}, a"
            f" {result['build'].upper()} build (torch.version.hip: {hip or 'None'},"
            f" torch.version.cuda: {cuda or 'None'}). It cannot use an AMD GPU: only a ROCm build"
            f" (torch.version.hip set) can. {came_from}On a host without an AMD GPU (CI), set"
            " pytorch_rocm_require_rocm_build: false."
        )
    elif result["gpu_present"] and not truthy(result["cuda_available"]):
        refusal = (
            f"pytorch_rocm: this host has /dev/kfd, but torch {result['torch_version']} (HIP"
            f" {hip}) says torch.cuda.is_available() is False. Check that the kernel driver"
            f" matches ROCm {plan['rocm_version']} (within two releases), and run rocminfo: a GPU"
            " it lists as unsupported needs the gfx_override role (HSA_OVERRIDE_GFX_VERSION)."
        )
    return {"result": result, "refusal": refusal}


# --- TensorFlow ---------------------------------------------------------------------------


def tensorflow_rocm_defaults(releases: dict, rocm_version, amd_base_url) -> dict:
    """The defaults the table gives a ROCm release: its newest TensorFlow, and AMD's listing of
    its wheels where AMD hosts them ("" for PyPI's releases and releases not in the table)."""
    rocm = _major_minor(rocm_version)
    row = (releases or {}).get(rocm) or {}
    newest = (row.get("tensorflow") or [""])[0]
    find_links = (
        f"{str(amd_base_url).rstrip('/')}/rocm-rel-{rocm}/" if row.get("source") == "amd" else ""
    )
    return {"newest": str(newest), "find_links": find_links}


def tensorflow_rocm_dist(package) -> str:
    """The package's normalised name (PEP 503), as importlib.metadata is asked for it."""
    return re.sub(r"[-_.]+", "-", str(package).lower())


def tensorflow_rocm_pin(package, version, rocm_version, releases: dict) -> str:
    """What pip is asked for after `==`: PyPI's tensorflow-rocm X.Y.Z.<ROCm digits>0, AMD's
    X.Y.Z.* (a plain X.Y.Z or X.Y.Z.<ROCm digits>), another package's X.Y.Z."""
    rocm = _major_minor(rocm_version)
    row = (releases or {}).get(rocm) or {}
    version = str(version)
    if tensorflow_rocm_dist(package) != "tensorflow-rocm":
        return version
    if row.get("source") == "pypi":
        return f"{version}.{rocm.replace('.', '')}0"
    return f"{version}.*"


def tensorflow_rocm_plan(settings: dict, python: dict | None = None) -> dict:
    """What tensorflow_rocm installs, or why it refuses to (only called while it is enabled).

    SETTINGS: rocm_version, version, package, python (the interpreter's path), index_url,
    find_links, no_index, amd_base_url, venv, releases and upstream_python (vars/main.yml's
    tables). PYTHON: see the module's doc."""
    releases = settings["releases"]
    pinned = str(settings["version"] or "").strip()
    package = str(settings["package"])
    rocm = _major_minor(settings["rocm_version"])
    row = releases.get(rocm) or {}
    # Not pinned: the newest TensorFlow the table pairs with the ROCm release.
    version = pinned or str((row.get("tensorflow") or [""])[0])
    dist = tensorflow_rocm_dist(package)
    is_rocm_package = dist == "tensorflow-rocm"
    release = _major_minor(version)
    pin = tensorflow_rocm_pin(package, version, settings["rocm_version"], releases)
    exact = pin[:-2] if pin.endswith(".*") else pin
    pythons = list(
        row.get("python", [])
        if is_rocm_package
        else (settings["upstream_python"] or {}).get(release, [])
    )
    defaults = tensorflow_rocm_defaults(
        releases, settings["rocm_version"], settings["amd_base_url"]
    )
    requirements = [f"{package}=={pin}"]
    plan = {
        "refusal": "",
        "package": package,
        "version": version,
        "pinned": bool(pinned),
        "rocm": rocm,
        "source": row.get("source", ""),
        "amd_base_url": str(settings["amd_base_url"]),
        "dist": dist,
        "pin": pin,
        "pin_regex": "^" + re.escape(exact) + ("([.][0-9]+)?$" if pin.endswith(".*") else "$"),
        "pythons": pythons,
        "index_url": str(settings["index_url"]),
        "find_links": str(settings["find_links"]),
        "no_index": truthy(settings["no_index"]),
        "requirements": requirements,
        "python_found": None,
        "downloads": [],
    }

    def refuse(message: str) -> dict:
        plan["refusal"] = message
        return plan

    if rocm not in releases and pinned:
        others = [name for name, r in releases.items() if pinned in r["tensorflow"]]
        return refuse(
            f"tensorflow_rocm_rocm_version: ROCm {rocm} is not in the table of TensorFlow builds"
            f" (roles/tensorflow_rocm/vars/main.yml). Known ROCm releases: {_listed(releases)};"
            f" those with TensorFlow {pinned} (tensorflow_rocm_version):"
            f" {_listed(others) or 'none in the table'}."
        )
    if rocm not in releases:
        newest = max(releases, key=_release_key)
        return refuse(
            _nothing_to_follow(
                "tensorflow_rocm", "TensorFlow", rocm, (newest, releases[newest]["tensorflow"][0])
            )
            + f" Known ROCm releases: {_listed(releases)}. Set tensorflow_rocm_rocm_version:"
            f' "{newest}" (docs/core-sdk.md), or leave TensorFlow off (tensorflow_rocm_enabled:'
            " false)."
        )
    if version not in row["tensorflow"]:
        others = [name for name, r in releases.items() if version in r["tensorflow"]]
        return refuse(
            f'tensorflow_rocm_version "{pinned}" does not fit tensorflow_rocm_rocm_version'
            f' "{settings["rocm_version"]}" (which follows rocm_repo_version by default): ROCm'
            f" {rocm} has TensorFlow {_listed(row['tensorflow'])}; ROCm releases with TensorFlow"
            f" {version}: {_listed(others) or 'none in the table'}. Set tensorflow_rocm_version:"
            f' "" to follow the ROCm release (TensorFlow {row["tensorflow"][0]}), or'
            f" tensorflow_rocm_rocm_version to a ROCm release with TensorFlow {version}."
        )
    if plan["no_index"] and not (plan["find_links"] and not plan["index_url"]):
        return refuse(
            f"tensorflow_rocm_no_index {settings['no_index']}, tensorflow_rocm_index_url"
            f' "{_masked(plan["index_url"])}", tensorflow_rocm_find_links'
            f' "{_masked(plan["find_links"])}": tensorflow_rocm_no_index: true needs a wheelhouse'
            f" and no index (AMD's is {plan['amd_base_url']}/rocm-rel-X.Y/)."
        )
    path = str(settings["python"])
    ran, found, why = _python_ran(python)
    if not ran:
        return refuse(
            f"tensorflow_rocm_python: {path} does not run ({why}). Install python3 or point"
            " tensorflow_rocm_python at an interpreter."
        )
    pyver = _major_minor(found)
    if pyver not in pythons:
        if is_rocm_package:
            where = "PyPI" if row["source"] == "pypi" else "AMD's listing"
            cp = " (cp310: Ubuntu 22.04, cp312: Ubuntu 24.04)" if row["source"] == "amd" else ""
            others = [name for name, r in releases.items() if pyver in r["python"]]
            has = (
                f"{where} has them for Python {_listed(pythons)}{cp}. ROCm releases with"
                f" tensorflow-rocm wheels for Python {pyver}:"
                f" {_listed(others) or 'none in the table'}. "
            )
        else:
            has = (
                f"upstream TensorFlow {release} has them for Python"
                f" {_listed(pythons) or 'none known to the table'}. "
            )
        return refuse(
            f"tensorflow_rocm_python: {package} {version} for ROCm {rocm} has no wheels for"
            f" Python {found} ({path}); {has}Set tensorflow_rocm_python to an interpreter of a"
            " supported version."
        )
    plan["python_found"] = {
        "path": path,
        "version": found,
        "package": f"{package} {version}",
        "wheels_for": pythons,
    }
    # From the configured index (unless pip reads the wheelhouse alone) and wheelhouse;
    # upstream: where this host would fetch its wheels without a lab cache (AMD's listing; PyPI's
    # releases from the index alone).
    plan["downloads"] = [
        entry(
            "wheels",
            "TensorFlow wheels",
            mirrors=pip_mirrors(
                "TensorFlow",
                "" if plan["no_index"] else plan["index_url"],
                plan["find_links"],
                package,
            ),
            upstream={"index_url": "", "find_links": defaults["find_links"]},
            requirements=requirements,
            python=pyver,
            path=settings["venv"],
            space="venvs",
        )
    ]
    return plan


def tensorflow_rocm_pip(plan: dict, probe: dict | None) -> dict:
    """Whether pip must run, why, and the other TensorFlow distributions in the venv (they own
    the same `tensorflow` module: the role removes them first)."""
    have = (probe or {}).get("dists") or {}
    got = have.get(plan["dist"])
    needed = got is None or re.match(plan["pin_regex"], str(got)) is None
    return {
        "needed": needed,
        "reason": (
            f"{plan['package']} {got or 'missing'}, wanted {plan['package']}=={plan['pin']}"
        ),
        "others": [name for name in have if name != plan["dist"]],
    }


def tensorflow_rocm_record(
    plan: dict, probe: dict, gpu_present, require_rocm_build, venv: str
) -> dict:
    """The record of what TensorFlow says about itself (fact tensorflow_rocm_result, and its
    JSON file), and the refusal of a TensorFlow that cannot use an AMD GPU ("" when none)."""
    result = {
        "venv": venv,
        "python": f"{venv}/bin/python",
        "python_version": probe.get("python"),
        "package": plan["package"],
        "package_version": (probe.get("dists") or {}).get(plan["dist"]),
        "tf_version": probe.get("tf_version"),
        "built_with_rocm": probe.get("built_with_rocm"),
        "gpus": probe.get("gpus"),
        "gpu_present": bool(gpu_present),
        "rocm_version": plan["rocm"],
        "index_url": _masked(plan["index_url"]),
        "find_links": _masked(plan["find_links"]),
        "no_index": plan["no_index"],
    }
    refusal = ""
    if not truthy(require_rocm_build):
        pass
    elif not truthy(result["built_with_rocm"]):
        where = (
            "PyPI"
            if plan["source"] == "pypi"
            else f"AMD's wheels ({plan['amd_base_url']}/rocm-rel-{plan['rocm']}/)"
        )
        refusal = (
            f"tensorflow_rocm: {result['python']} has {plan['package']} {result['tf_version']},"
            " which is not built with ROCm (tf.test.is_built_with_rocm() is False). It cannot use"
            f" an AMD GPU. Install tensorflow-rocm (tensorflow_rocm_package) from {where} or a"
            " wheelhouse holding them. On a host without an AMD GPU (CI), set"
            " tensorflow_rocm_require_rocm_build: false."
        )
    elif result["gpu_present"] and not result["gpus"]:
        refusal = (
            f"tensorflow_rocm: this host has /dev/kfd, but TensorFlow {result['tf_version']} lists"
            " no GPU (tf.config.list_physical_devices('GPU') is empty). Check that the kernel"
            f" driver matches ROCm {plan['rocm']} and that the user space TensorFlow needs is"
            " installed (role rocm_packages), and run rocminfo: a GPU it lists as unsupported"
            " needs the gfx_override role (HSA_OVERRIDE_GFX_VERSION)."
        )
    return {"result": result, "refusal": refusal}


class FilterModule:
    def filters(self):
        return {
            "pytorch_rocm_index": pytorch_rocm_index,
            "pytorch_rocm_plan": pytorch_rocm_plan,
            "pytorch_rocm_pip": pytorch_rocm_pip,
            "pytorch_rocm_record": pytorch_rocm_record,
            "tensorflow_rocm_defaults": tensorflow_rocm_defaults,
            "tensorflow_rocm_plan": tensorflow_rocm_plan,
            "tensorflow_rocm_pip": tensorflow_rocm_pip,
            "tensorflow_rocm_record": tensorflow_rocm_record,
        }
