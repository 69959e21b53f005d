# Copyright: rocmlab contributors
# Apache License 2.0
"""Check the settings of every host of the play against the roles' declarations, once, on the
controller (role rocmlab, tasks/roles.yml runs it with run_once before any host changes).

Each role declares its settings once, in roles/<role>/meta/settings.yml. For every host of the
play's batch this action resolves the role's settings as the host's own tasks would see them
(inventory, play, extra vars and facts over the roles' defaults and vars, templated for that
host), validates them against the declared types and choices (Ansible's own argument spec
validator, as a role's entry point does) and against the declared checks
(module_utils/settings.py), and returns, per host, the problems (one sentence each) and the
checks that only the host itself can answer (owner: root), for the rocmlab_settings module.
With role rocmlab's settings it also refuses what no role reads: a variable the inventory (its
files, group_vars and host_vars), the play or the extra vars set whose name starts with a
role's name and "_", that no meta/settings.yml declares as a setting, a fact the role publishes
or a retired name, naming where it was set and the closest setting (a typo otherwise leaves the
default in place without a word); rocmlab_settings_allow_unknown lists a site's own.
Nothing is sent to any host.
"""

from __future__ import annotations

from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.inventory.helpers import sort_groups
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.vars import combine_vars
from ansible.vars.plugins import get_vars_from_inventory_sources, get_vars_from_path
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.settings import (
    ALLOW_UNKNOWN,
    check_spec,
    declared_names,
    declared_options,
    problems_of,
    retired_problems,
    truthy,
    unknown_problems,
)

ROLES = Path(__file__).resolve().parents[2] / "roles"
# Always checked with the roles a run applies: the lab cache a host names, its run lock and dpkg.
COMMON_ROLE = "rocmlab"


def plain(value):
    """VALUE as plain Python data (the templating engine returns tagged or lazy containers)."""
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def load(self, path):
        return (
            self._loader.load_from_file(str(path), trusted_as_template=True)
            if path.is_file()
            else {}
        )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        roles = list(self._task.args.get("roles") or [])
        only = self._task.args.get("only")
        common_only = self._task.args.get("common_only")
        if common_only is not None:
            common_only = [str(name) for name in common_only]
        common = self._task.args.get("common", True) and only is None
        if (common or common_only is not None) and COMMON_ROLE not in roles:
            roles.append(COMMON_ROLE)
        # Which settings of each role are checked (None: all of them).
        limits = {role: only for role in roles}
        if common_only is not None:
            limits[COMMON_ROLE] = common_only
        unknown = [role for role in roles if not (ROLES / role / "meta" / "settings.yml").is_file()]
        if unknown:
            raise AnsibleError(f"rocmlab_check_settings: no meta/settings.yml for {unknown}")
        declarations = {role: self.load(ROLES / role / "meta" / "settings.yml") for role in roles}
        # A role that uses another's settings checks them too, whether that role runs or not
        # (cluster_check runs as smoke_test's account, in its venv, on its dataset).
        for role in list(roles):
            for used in declarations[role].get("includes") or []:
                if used not in declarations:
                    roles.append(used)
                    declarations[used] = dict(
                        self.load(ROLES / used / "meta" / "settings.yml"), checked_when=None
                    )

        manager = self._task.get_variable_manager()
        play = self._task.get_play()
        hosts = list(task_vars.get("ansible_play_batch") or [task_vars["inventory_hostname"]])
        every_role = self.every_role() if limits.get(COMMON_ROLE, False) is None else {}
        names = declared_names(every_role)
        problems, on_host, places_of = {}, {}, {}
        for name in hosts:
            variables = self.host_variables(manager, play, name, roles, task_vars)
            templar = self._templar.copy_with_new_env(available_variables=variables)
            found, host_checks = [], []
            if limits.get(COMMON_ROLE, False) is None:
                found += retired_problems(declarations[COMMON_ROLE].get("retired"), variables)
                places = self.places(manager, play, name, templar, places_of)
                found += self.unknown(every_role, names, places, variables, templar)
            for role in roles:
                role_problems, role_host_checks = self.role_problems(
                    declarations[role], variables, templar, limits.get(role)
                )
                found += role_problems
                host_checks += role_host_checks
            if found:
                problems[name] = found
            if host_checks:
                on_host[name] = host_checks
        result.update(changed=False, problems=problems, on_host=on_host, roles=roles)
        return result

    def every_role(self):
        """Every role's declaration, by role: the roles' names give the prefixes of their
        variables, and their declarations every name a role reads or sets."""
        return {
            role.name: self.load(role / "meta" / "settings.yml")
            for role in sorted(ROLES.iterdir())
            if (role / "meta" / "settings.yml").is_file()
        }

    @staticmethod
    def unknown(every_role, names, places, variables, templar):
        """The problems of the variables in PLACES that no role declares (NAMES: the settings
        and every declared name, module_utils settings.unknown_problems), less the site's own
        (rocmlab_settings_allow_unknown, whose value the settings check itself checks)."""
        try:
            allowed = plain(templar.template(variables.get(ALLOW_UNKNOWN, [])))
        except AnsibleError:
            allowed = []
        if not isinstance(allowed, list):
            allowed = []
        settings, known = names
        return unknown_problems(places, every_role, known, settings, allowed)

    def places(self, manager, play, name, templar, cache):
        """Where the inventory, the play and the extra vars set each variable of host NAME:
        {variable: [place, ...]}, in Ansible's order of precedence (VariableManager.get_vars):
        the inventory's groups (its files, then group_vars read by the vars plugins), the host
        (the same), the play's vars and vars_files, the extra vars. Role defaults and vars,
        facts and registered results are none of these. CACHE keeps each group's between hosts."""
        host = manager._inventory.get_host(name)
        found = {}

        def note(data, place):
            for variable in data or {}:
                found.setdefault(str(variable), [])
                if place not in found[str(variable)]:
                    found[str(variable)].append(place)

        for group in sort_groups(host.get_groups()):
            if group.name not in cache:
                cache[group.name] = [
                    (group.get_vars(), f"the inventory's vars of group {group.name}"),
                    (self.plugin_vars(manager, group), f"group_vars/{group.name}"),
                ]
            for data, place in cache[group.name]:
                note(data, place)
        note(host.get_vars(), f"the inventory's vars of host {name}")
        note(self.plugin_vars(manager, host), f"host_vars/{name}")
        if play is not None:
            note(play.get_vars(), "the play's vars")
            for data in self.vars_files(play, templar):
                note(data, "the play's vars_files")
        note(manager.extra_vars, "the extra vars")
        return found

    def plugin_vars(self, manager, entity):
        """What the vars plugins (group_vars/ and host_vars/ beside the inventory and the
        playbook) give ENTITY, a group or a host, as VariableManager.get_vars asks them."""
        data = get_vars_from_inventory_sources(
            self._loader, manager._inventory._sources, [entity], "task"
        )
        search = self._task.get_search_path()
        if C.PLAYBOOK_VARS_ROOT in ("bottom", "playbook_dir"):
            search = search[:1]
        elif C.PLAYBOOK_VARS_ROOT == "top":
            search = [self._loader.get_basedir()] if manager.safe_basedir else []
        for path in search:
            data = combine_vars(data, get_vars_from_path(self._loader, path, [entity], "task"))
        return data

    def vars_files(self, play, templar):
        """The data of each of the play's vars_files, the first found of each entry (a file
        that cannot be found or read is Ansible's to report)."""
        for entry in play.get_vars_files():
            for candidate in entry if isinstance(entry, list) else [entry]:
                try:
                    path = self._loader.path_dwim_relative_stack(
                        play.get_search_path(), "vars", templar.template(candidate)
                    )
                    data = self._loader.load_from_file(path, unsafe=True)
                except AnsibleError:
                    continue
                yield from data if isinstance(data, list) else [data]
                break

    def host_variables(self, manager, play, name, roles, task_vars):
        """What HOST's tasks see: its variables in this task's context (inventory, facts, play
        and extra vars, role rocmlab's) over the checked roles' defaults, vars and the vars file
        of the host's distribution (what a role's validate.yml loads with include_vars)."""
        host = manager._inventory.get_host(name)
        own = manager.get_vars(
            play=play,
            host=host,
            task=self._task,
            _hosts=task_vars.get("ansible_play_hosts"),
            _hosts_all=task_vars.get("ansible_play_hosts_all"),
        )
        facts = own.get("ansible_facts") or {}
        system = f"{facts.get('distribution')}-{facts.get('distribution_major_version')}"
        # The roles' vars read role_path (the roles sit side by side): rocmlab's where this task
        # is not in a role.
        variables = {"role_path": str(ROLES / COMMON_ROLE)}
        for role in roles:
            variables = combine_vars(variables, self.load(ROLES / role / "defaults" / "main.yml"))
        for role in roles:
            variables = combine_vars(variables, self.load(ROLES / role / "vars" / "main.yml"))
            variables = combine_vars(variables, self.load(ROLES / role / "vars" / f"{system}.yml"))
        return combine_vars(variables, own)

    def role_problems(self, declaration, variables, templar, only):
        """The problems of one role's settings for one host, and its checks for the host."""
        gate = declaration.get("checked_when") if only is None else None
        if gate and not truthy(templar.template(variables.get(gate))):
            return [], []
        options = {
            name: option
            for name, option in declared_options(declaration).items()
            if only is None or name in only
        }
        values = {}
        problems = []
        for name in options:
            if name not in variables:
                continue
            try:
                values[name] = plain(templar.template(variables[name]))
            except AnsibleError as exc:
                problems.append(f"{name}: cannot be resolved ({exc.message}).")
        spec = {
            name: {key: item for key, item in option.items() if key != "check"}
            for name, option in options.items()
            if name in values
        }
        errors = ArgumentSpecValidator(spec).validate(values, validate_role_argument_spec=True)
        problems += [f"{message}." for message in errors.error_messages]
        host_checks = []
        for name, option in options.items():
            if name not in values or "check" not in option:
                continue
            check = plain(templar.template(option["check"]))
            problems_here, on_host = self.checked(name, check, values[name])
            problems += problems_here
            host_checks += on_host
        derived_checks = declaration.get("derived") or [] if only is None else []
        for derived in derived_checks:
            if not truthy(templar.template(derived.get("when", True))):
                continue
            name = str(templar.template(derived["name"]))
            value = plain(templar.template(derived["value"]))
            problems_here, on_host = self.checked(name, plain(derived["check"]), value)
            problems += problems_here
            host_checks += on_host
        return problems, host_checks

    @staticmethod
    def checked(name, check, value):
        """Problems found here, and the check again for the host when it needs the host."""
        spec = check_spec(name, check, value)
        host_side = spec.pop("owner", None)
        problems = problems_of(spec)
        if problems or host_side is None:
            return problems, []
        return [], [dict(spec, owner=host_side)]
