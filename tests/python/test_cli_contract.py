"""The CLI's contract (src/rocmlab/data/cli_contract.json) is the one source of what ``rocmlab
smoke`` offers the roles: the CLI accepts exactly what it lists, its exit codes are the ones the
code and the report use, and the smoke_test role's copy is generated from it and used by the
role's checks; a change in one place only fails ``tools/role_docs.py --check``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlab_testutil import REPO, role_docs_tree

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
    assert main(["smoke", "--data", str(tmp_path), *args]) == 4
    err = capsys.readouterr().err.split("\nusage:")[0]
    assert said in err
    assert all(name in err for name in listed)


def test_every_option_the_role_sets_is_an_option_of_smoke() -> None:
    smoke = options_of("smoke")
    assert SMOKE["set_by_role"] and all(option in smoke for option in SMOKE["set_by_role"])


def test_the_exit_codes_are_the_codes_the_job_uses() -> None:
    from rocmlab.smoke.report import REPORT_SCHEMA

    codes = [code for row in SMOKE["exit_codes"] for code in row["codes"]]
    assert codes == [int(code) for code in ExitCode] + [130, 143]  # 128 + SIGINT, SIGTERM
    assert REPORT_SCHEMA["properties"]["exit_code"]["enum"] == codes
    assert REPORT_SCHEMA["properties"]["model"]["enum"] == SMOKE["models"]
    assert REPORT_SCHEMA["properties"]["dataset"]["enum"] == SMOKE["datasets"]
    for command in ([], ["smoke"], ["fetch-mnist"]):
        help_text = build_parser().subcommands[command[0]] if command else build_parser()
        assert contract.exit_codes_help() in help_text.format_help()


def test_every_listed_dataset_and_model_exists() -> None:
    from rocmlab.datasets.catalog import DATASETS
    from rocmlab.smoke.model import MODELS

    assert set(SMOKE["datasets"]) == set(DATASETS)
    assert set(SMOKE["models"]) == set(MODELS)


def test_the_documented_exit_codes_are_the_contracts() -> None:
    text = (REPO / "docs" / "smoke-job.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    table = section[section.index("\n|") :].split("\n\n", 1)[0]
    documented = [
        int(code) for row in re.findall(r"^\| ([\d, ]+) \|", table, re.M) for code in row.split(",")
    ]
    assert documented == [code for row in SMOKE["exit_codes"] for code in row["codes"]]


# --- The smoke_test role -------------------------------------------------------------------


def role_vars() -> dict[str, Any]:
    return yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def test_the_roles_copy_is_the_contract() -> None:
    roles = role_vars()
    assert roles["__smoke_test_models"] == SMOKE["models"]
    assert roles["__smoke_test_techniques"] == SMOKE["techniques"]
    assert roles["__smoke_test_datasets"] == SMOKE["datasets"]
    assert roles["__smoke_test_reserved_args"] == SMOKE["set_by_role"]
    meanings = {code: row["meaning"] for row in SMOKE["exit_codes"] for code in row["codes"]}
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
