"""The CLI's contract (src/rocmlab/data/cli_contract.json) is the one source of what ``rocmlab
smoke`` offers the roles and of every command's exit codes: the CLI accepts exactly what it lists,
its exit-code table is the one the code, the reports, every --help and docs/cli.md use, every
command refuses a bad input with 2 in one line (no traceback, nothing created), and the smoke_test
role's copy is generated from it and used by the role's checks; a change in one place only fails
``tools/role_docs.py --check``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlab_testutil import REPO, role_docs_tree

from rocmlab import DOCS
from rocmlab.cli import build_parser, main
from rocmlab.common import contract
from rocmlab.common.errors import ExitCode

_spec = importlib.util.spec_from_file_location("role_docs", REPO / "tools" / "role_docs.py")
assert _spec is not None and _spec.loader is not None
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)

CONTRACT_FILE = REPO / "src" / "rocmlab" / "data" / "cli_contract.json"
ROLE = REPO / "roles" / "smoke_test"
SMOKE = json.loads(CONTRACT_FILE.read_text())["smoke"]


def options_of(command: str) -> dict[str, Any]:
    """The argparse actions of ``rocmlab COMMAND`` by option string."""
    parser = build_parser().subcommands[command]
    return {name: action for action in parser._actions for name in action.option_strings}


def test_the_package_reads_the_file_it_ships() -> None:
    assert contract.MODELS == tuple(SMOKE["models"]) == ("mlp", "cnn")
    assert contract.TECHNIQUES == ("accumulation", "checkpoint", "amp", "profile")
    assert contract.DATASETS == ("mnist", "fashion-mnist")
    assert '"rocmlab.data" = ["*.json"]' in (REPO / "pyproject.toml").read_text()


def test_smoke_and_fetch_mnist_offer_exactly_the_contracts_choices() -> None:
    smoke = options_of("smoke")
    assert list(smoke["--model"].choices) == SMOKE["models"]
    assert list(smoke["--dataset"].choices) == sorted(SMOKE["datasets"])
    assert list(options_of("fetch-mnist")["--dataset"].choices) == sorted(SMOKE["datasets"])
    techniques = smoke["--techniques"].type
    assert techniques(",".join(SMOKE["techniques"])) == tuple(SMOKE["techniques"])


@pytest.mark.parametrize(
    ("args", "said", "listed"),
    [
        (["--model", "vit"], "argument --model: invalid choice: 'vit'", SMOKE["models"]),
        (["--dataset", "cifar10"], "argument --dataset: invalid choice: 'cifar10'",
         SMOKE["datasets"]),
        (["--techniques", "amp,zero"], "unknown 'zero'; expected a comma-separated list of "
         "accumulation, checkpoint, amp, profile", SMOKE["techniques"]),
    ],
)  # fmt: skip
def test_what_the_contract_does_not_list_is_refused(
    args: list[str],
    said: str,
    listed: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["smoke", "--data", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.split("\nusage:")[0]
    assert said in err
    assert all(name in err for name in listed)


def test_every_option_the_role_sets_is_an_option_of_smoke() -> None:
    smoke = options_of("smoke")
    assert SMOKE["set_by_role"] and all(option in smoke for option in SMOKE["set_by_role"])


TABLE = json.loads(CONTRACT_FILE.read_text())["exit_codes"]


def test_the_exit_code_table_is_the_codes_the_code_uses() -> None:
    from rocmlab.allreduce.report import ALLREDUCE_SCHEMA
    from rocmlab.smoke.report import REPORT_SCHEMA

    codes = [code for row in TABLE for code in row["codes"]]
    assert codes == [int(code) for code in ExitCode] + [130, 143]  # 128 + SIGINT, SIGTERM
    assert [row["codes"] for row in TABLE[:3]] == [[0], [1], [2]]
    assert TABLE[2]["commands"] == list(build_parser().subcommands)  # 2 is every command's
    assert all(set(row["commands"]) <= set(build_parser().subcommands) for row in TABLE)
    assert REPORT_SCHEMA["properties"]["exit_code"]["enum"] == list(contract.exit_codes_of("smoke"))
    assert set(ALLREDUCE_SCHEMA["properties"]["exit_code"]["enum"]) <= set(
        contract.exit_codes_of("allreduce")
    )
    assert REPORT_SCHEMA["properties"]["model"]["enum"] == SMOKE["models"]
    assert REPORT_SCHEMA["properties"]["dataset"]["enum"] == SMOKE["datasets"]


def test_every_help_lists_its_commands_rows_of_the_table() -> None:
    parser = build_parser()
    assert contract.exit_codes_help() in parser.format_help()
    assert "docs/cli.md" in parser.format_help()
    for name, sub in parser.subcommands.items():
        text = sub.format_help()
        assert contract.exit_codes_help(name) in text
        assert "docs/" not in text.replace(DOCS, "")  # a host has no docs/: the URL, if any


def test_help_texts_cite_the_repository_the_collection_declares() -> None:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert galaxy["documentation"].rsplit("/", 1)[0] + "/docs" == DOCS
    assert DOCS.startswith(galaxy["repository"] + "/")
    for page in ("doctor.md", "health.md", "fleet-report.md", "cluster-check.md", "smoke-job.md"):
        assert (REPO / "docs" / page).is_file()


# Every command's bad inputs: {T} is a directory with data/ (empty), file (a file) and reports/.
BAD_INPUTS = [
    ([], "usage: rocmlab"),
    (["bogus"], "argument COMMAND: invalid choice: 'bogus'"),
    (["smoke", "--data", "{T}/data", "--json", "{T}/missing/r.json"],
     "--json {T}/missing/r.json: the directory {T}/missing does not exist (it is not created)"),
    (["smoke", "--data", "{T}/data", "--json", "{T}/data"], "--json {T}/data: is a directory"),
    (["smoke", "--data", "{T}/data", "--json", "{T}/file/r.json"],
     "--json {T}/file/r.json: {T}/file is not a directory"),
    (["smoke", "--data", "{T}/data", "--doctor-json", "{T}/data"],
     "--doctor-json {T}/data: cannot read it"),
    (["smoke", "--data", "{T}/data", "--model", "vit"], "argument --model: invalid choice"),
    (["smoke", "--data", "{T}/data", "--seed=-1"], "argument --seed: '-1' is out of range"),
    (["fetch-mnist", "--from", "{T}/data", "--dest", "{T}/file"],
     "--dest {T}/file: not a directory (expected a directory, created when missing)"),
    (["fetch-mnist", "--from", "{T}/data", "--dest", "{T}/file/mnist"],
     "--dest {T}/file/mnist: {T}/file is not a directory"),
    (["fetch-mnist", "--from", "{T}/data", "--dest", "{T}/d", "--attempts", "0"],
     "argument --attempts: '0' is out of range"),
    (["doctor", "--json", "{T}/missing/d.json"], "--json {T}/missing/d.json: the directory"),
    (["doctor", "--json", "{T}/reports"], "--json {T}/reports: is a directory"),
    (["doctor", "--sysfs-root", "{T}/file"], "--sysfs-root {T}/file: not a directory"),
    (["doctor", "--kernel-log", "{T}/data"], "--kernel-log {T}/data: not a readable file"),
    (["health", "--state-dir", "{T}/state", "--json", "{T}/missing/h.json"],
     "--json {T}/missing/h.json: the directory"),
    (["health", "--state-dir", "{T}/state", "--textfile", "{T}/missing/h.prom"],
     "--textfile {T}/missing/h.prom: the directory"),
    (["health", "--state-dir", "{T}/state", "--textfile", "{T}/h.txt"],
     "--textfile {T}/h.txt: node_exporter's textfile collector reads only files ending in .prom"),
    (["health", "--state-dir", "{T}/file"], "--state-dir {T}/file: not a directory"),
    (["fleet-report", "{T}/file", "--hosts", "a"], "REPORTS_DIR '{T}/file': no such directory"),
    (["fleet-report", "{T}/reports", "--inventory", "{T}/nope"], "--inventory {T}/nope: no such"),
    (["fleet-report", "{T}/reports", "--hosts", "a", "--slow-fraction", "0"],
     "argument --slow-fraction: '0' is out of range"),
    (["verified", "{T}/file"], "REPORTS_DIR '{T}/file': no such directory"),
    (["verified", "{T}/reports"], "REPORTS_DIR '{T}/reports' holds no smoke report"),
    (["verified", "{T}/reports", "--add-to", "{T}/missing/v.json"],
     "--add-to {T}/missing/v.json: the directory {T}/missing does not exist (it is not created)"),
    (["verified", "{T}/reports", "--add-to", "{T}/file"],
     "--add-to {T}/file: not a verified file: not valid JSON"),
    (["verified", "{T}/reports", "--add-to", "{T}/reports"],
     "--add-to {T}/reports: is a directory"),
    (["allreduce", "--json", "{T}/missing/a.json"], "--json {T}/missing/a.json: the directory"),
    (["allreduce", "--json", "{T}/reports"], "--json {T}/reports: is a directory"),
    (["allreduce", "--backend", "gloo", "--device", "cuda"], "--backend gloo runs on the CPU"),
]  # fmt: skip


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (None for a directory)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in root.rglob("*")
    }


def test_every_command_has_bad_inputs_here() -> None:
    assert {args[0] for args, _ in BAD_INPUTS if args} - {"bogus"} == set(
        build_parser().subcommands
    )


@pytest.mark.parametrize(("args", "said"), BAD_INPUTS, ids=lambda v: " ".join(v)[:60])
def test_a_bad_input_exits_2_in_one_line_creating_nothing(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "reports").mkdir()
    (tmp_path / "file").write_text("x")
    before = tree(tmp_path)
    argv = [arg.replace("{T}", str(tmp_path)) for arg in args]
    assert main(argv) == int(ExitCode.BAD_ARGUMENTS)
    out, err = capsys.readouterr()
    assert out == ""
    assert said.replace("{T}", str(tmp_path)) in err
    assert "Traceback" not in err
    if args:  # rocmlab alone prints the help
        message = err.split("\nusage:", 1)[0]
        assert message.startswith("rocmlab: error: ") and "\n" not in message.rstrip("\n")
        assert err.count(message.rstrip("\n")) == 1  # said once
    assert tree(tmp_path) == before  # nothing created, nothing written


def test_every_listed_dataset_and_model_exists() -> None:
    from rocmlab.datasets.catalog import DATASETS
    from rocmlab.smoke.model import MODELS

    assert set(SMOKE["datasets"]) == set(DATASETS)
    assert set(SMOKE["models"]) == set(MODELS)


def test_docs_cli_md_is_the_table() -> None:
    """The users' table (docs/cli.md) row by row: the codes, the meaning, the commands."""
    text = (REPO / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| ([\d, ]+) \| (.+) \| (.+) \|$", text, re.M)
    every = set(build_parser().subcommands)
    assert [
        ([int(c) for c in codes.split(",")], meaning, commands) for codes, meaning, commands in rows
    ] == [
        (
            row["codes"],
            row["meaning"],
            "every command"
            if set(row["commands"]) == every
            else ", ".join(f"`{c}`" for c in row["commands"]),
        )
        for row in TABLE
    ]
    for page in ("smoke-job.md", "doctor.md", "health.md", "fleet-report.md", "cluster-check.md"):
        assert "cli.md" in (REPO / "docs" / page).read_text(), page  # documented once, linked


# --- The smoke_test role -------------------------------------------------------------------


def role_vars() -> dict[str, Any]:
    return yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def test_the_roles_copy_is_the_contract() -> None:
    roles = role_vars()
    assert roles["__smoke_test_models"] == SMOKE["models"]
    assert roles["__smoke_test_techniques"] == SMOKE["techniques"]
    assert roles["__smoke_test_datasets"] == SMOKE["datasets"]
    assert roles["__smoke_test_reserved_args"] == SMOKE["set_by_role"]
    meanings = {
        code: row["meaning"] for row in contract.exit_rows("smoke") for code in row["codes"]
    }
    assert roles["__smoke_test_cli_exit_meaning"] == meanings
    # The role adds its own: the timeout it puts around the job.
    assert "__smoke_test_cli_exit_meaning | combine({124:" in roles["__smoke_test_exit_meaning"]


def settings_rows(declaration: Any) -> dict[str, dict[str, Any]]:
    """The checks a role's meta/settings.yml declares (what role rocmlab's settings check runs),
    by setting."""
    rows: dict[str, dict[str, Any]] = {}
    for entry in declaration["argument_specs"].values():
        for name, option in (entry.get("options") or {}).items():
            if "check" in option:
                rows.setdefault(name, option["check"])
    return rows


def resolved(value: Any, variables: dict[str, Any]) -> Any:
    """``"{{ name }}"`` as the role variable it names; anything else as it is."""
    match = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value) if isinstance(value, str) else None
    return variables[match[1]] if match else value


def test_the_roles_checks_offer_what_the_cli_accepts() -> None:
    rows = settings_rows(yaml.safe_load((ROLE / "meta" / "settings.yml").read_text()))
    variables = role_vars()
    assert resolved(rows["smoke_test_model"]["choices"], variables) == SMOKE["models"]
    assert resolved(rows["smoke_test_dataset"]["choices"], variables) == SMOKE["datasets"]
    element = rows["smoke_test_techniques"]["element"]
    assert resolved(element["choices"], variables) == SMOKE["techniques"]
    assert resolved(rows["smoke_test_args"]["reserved"], variables) == SMOKE["set_by_role"]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The roles, the playbooks (a fact they set is a role's to list), the lab example and the
    contract, copied so that a test can make them drift (with what else tools/role_docs.py reads
    and writes: the support catalog's reader, its copy and the README)."""
    return role_docs_tree(tmp_path)


def edit_contract(root: Path, change: Any) -> None:
    path = root / "src" / "rocmlab" / "data" / "cli_contract.json"
    document = json.loads(path.read_text())
    change(document["smoke"])
    path.write_text(json.dumps(document, indent=2))


def test_a_model_added_to_the_contract_only_is_drift_until_the_role_follows(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_contract(copy, lambda smoke: smoke["models"].append("vit"))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "roles/smoke_test/vars/main.yml is not what tools/role_docs.py generates" in err
    assert (
        "smoke_test: smoke_test_model's choices are ['mlp', 'cnn'] in argument_specs but "
        "['mlp', 'cnn', 'vit'] in src/rocmlab/data/cli_contract.json" in err
    )
    assert role_docs.main(["--root", str(copy)]) == 1  # the role's copy follows, the spec not
    assert yaml.safe_load((copy / "roles/smoke_test/vars/main.yml").read_text())[
        "__smoke_test_models"
    ] == ["mlp", "cnn", "vit"]
    spec = copy / "roles" / "smoke_test" / "meta" / "settings.yml"
    spec.write_text(spec.read_text().replace("choices: [mlp, cnn]", "choices: [mlp, cnn, vit]"))
    assert role_docs.main(["--root", str(copy)]) == 0  # what is generated follows the declaration
    assert role_docs.main(["--check", "--root", str(copy)]) == 0


def test_an_option_the_role_sets_that_its_description_omits_is_drift(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_contract(copy, lambda smoke: smoke["set_by_role"].append("--seed"))
    assert role_docs.main(["--root", str(copy)]) == 1
    assert (
        "smoke_test: the description of smoke_test_args in argument_specs does not name --seed "
        "(set_by_role in src/rocmlab/data/cli_contract.json)" in capsys.readouterr().err
    )


def test_an_exit_meaning_edited_in_the_role_is_drift(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy / "roles" / "smoke_test" / "vars" / "main.yml"
    path.write_text(path.read_text().replace('3: "data missing', '3: "dataset missing'))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert "roles/smoke_test/vars/main.yml is not what" in capsys.readouterr().err
    assert role_docs.main(["--root", str(copy)]) == 0
    assert '3: "data missing' in path.read_text()
