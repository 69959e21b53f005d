"""The scenarios' containers, created and removed with one `docker` command each instead of the
Docker driver's own create and destroy playbooks (which run several modules per platform: about
9 s of CPU to destroy three containers that do not exist, twice per scenario). Molecule runs it
through molecule/shared/create.yml and destroy.yml (provisioner.playbooks in
.config/molecule/config.yml), with the scenario's platforms as JSON on stdin:

    containers.py create|destroy < platforms.json

It knows the platform keys the scenarios use (name, image, pre_build_image, command, networks,
groups, capabilities) and refuses any other, naming it, rather than ignore it. The containers are
what the driver made: hostname the platform's name, label owner=molecule, the image as it is
(pre-built: the harness builds the images, tools/images/), attached to the listed networks only
(else Docker's default bridge), the command split as a shell would. A listed network that does
not exist is created with label owner=molecule, and removed again by destroy when no container
uses it; the harness's own network (rocmlab-test, made by tools/test) is never removed.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

KNOWN = {"name", "image", "pre_build_image", "command", "networks", "groups", "capabilities"}


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and run.returncode != 0:
        sys.exit(f"docker {' '.join(args)}: {run.stderr.strip() or run.stdout.strip()}")
    return run


def checked(platforms: list[dict]) -> list[dict]:
    for platform in platforms:
        unknown = sorted(set(platform) - KNOWN)
        if unknown:
            sys.exit(
                f"platform {platform.get('name')}: {', '.join(unknown)} not supported by "
                f"molecule/shared/containers.py (it knows {', '.join(sorted(KNOWN))}); add it there"
            )
        if platform.get("pre_build_image") is not True:
            sys.exit(f"platform {platform['name']}: pre_build_image must be true (tools/images/)")
    return platforms


def networks_of(platform: dict) -> list[str]:
    return [network["name"] for network in platform.get("networks") or []]


def create(platforms: list[dict]) -> None:
    for network in sorted({n for platform in platforms for n in networks_of(platform)}):
        if docker("network", "inspect", network, check=False).returncode != 0:
            docker("network", "create", "--label", "owner=molecule", network)
    for platform in platforms:
        name = platform["name"]
        if docker("container", "inspect", name, check=False).returncode == 0:
            continue  # as the driver's `recreate: false`
        networks = networks_of(platform)
        argv = ["run", "-d", "--name", name, "--hostname", name, "--label", "owner=molecule"]
        argv += ["--log-driver", "json-file"]
        argv += [f"--cap-add={cap}" for cap in platform.get("capabilities") or []]
        argv += [f"--network={networks[0]}"] if networks else []
        command = platform.get("command") or 'bash -c "while true; do sleep 10000; done"'
        docker(*argv, platform["image"], *shlex.split(command))
        for network in networks[1:]:
            docker("network", "connect", network, name)
        print(f"created {name}")


def destroy(platforms: list[dict]) -> None:
    names = [platform["name"] for platform in platforms]
    docker("rm", "--force", "--volumes", *names, check=False)
    for network in sorted({n for platform in platforms for n in networks_of(platform)}):
        found = docker("network", "inspect", network, check=False)
        if found.returncode != 0:
            continue
        info = json.loads(found.stdout)[0]
        if (info.get("Labels") or {}).get("owner") == "molecule" and not info.get("Containers"):
            docker("network", "rm", network, check=False)
    print(f"removed {' '.join(names)}")


def main() -> None:
    action = sys.argv[1] if len(sys.argv) == 2 else ""
    if action not in ("create", "destroy"):
        sys.exit("usage: containers.py create|destroy < platforms.json")
    platforms = checked(json.load(sys.stdin))
    (create if action == "create" else destroy)(platforms)


if __name__ == "__main__":
    main()
