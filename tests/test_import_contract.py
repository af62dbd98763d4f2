"""The import contract: data flows env → agent → policy → trajectory → algorithm → loss → checkpoint, one way.

Every module of the package belongs to one stage (``STAGES``, from the bottom up). A module may import modules of
its own stage or of stages below it, never above; imports inside functions count too (a lazy import still couples
the modules). ``envs`` and ``agents`` take from the core only ``agentrl.errors`` and ``agentrl.registry``; the
plain records and configs at the bottom import no torch, and neither does ``agentrl.algos`` (a user lifting an
algorithm into another trainer needs NumPy only). The module graph has no cycles.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"agentrl": ROOT / "src" / "agentrl", "agentrl.envs": ROOT / "envs", "agentrl.agents": ROOT / "agents"}

#: (stage, module-name prefixes), from the bottom up. The longest matching prefix decides a module's stage.
STAGES = [
    # Records, configs, hardware probes and the model catalog (names → folders and builders; torch only inside the
    # builders), which config building reads.
    ("records", ["agentrl.errors", "agentrl.registry", "agentrl.records", "agentrl.config", "agentrl.hardware",
                 "agentrl.algos.types", "agentrl.models.registry", "agentrl.models.tiny"]),
    ("env", ["agentrl.envs"]),
    ("agent", ["agentrl.agents"]),
    ("policy", ["agentrl.models", "agentrl.policy", "agentrl.generators", "agentrl.vllm_generator"]),
    ("trajectory", ["agentrl.envpool", "agentrl.raypool", "agentrl.rollout", "agentrl.dynamic_sampling"]),
    ("algorithm", ["agentrl.algos", "agentrl.diagnostics"]),
    ("loss", ["agentrl.learner", "agentrl.distributed"]),
    ("checkpoint", ["agentrl.checkpoint", "agentrl.runlog"]),
    ("application", ["agentrl.trainer", "agentrl.evaluation", "agentrl.sft", "agentrl.inspector",
                     "agentrl.inspector_page", "agentrl.testing", "agentrl.cli", "agentrl"]),
    # Adapters into other trainers (verl, SkyRL, TRL): they take agentrl's algorithms, nothing imports them.
    ("integration", ["agentrl.integrations"]),
]
#: What envs/ and agents/ may take from the rest of agentrl.
LEAVES = ("agentrl.errors", "agentrl.registry")


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def stage(module: str) -> int:
    best, rank = -1, None
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"{module} is in no stage of the import contract; add it to STAGES"
    return rank


def imports(module: str) -> set[str]:
    """The agentrl modules ``module`` imports anywhere in its body (``from pkg import submodule`` resolved)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in out if name in MODULES and name != module}


GRAPH = {module: imports(module) for module in MODULES}


def test_no_import_runs_against_the_data_flow():
    against = [f"{module} ({STAGES[stage(module)][0]}) imports {target} ({STAGES[stage(target)][0]})"
               for module, targets in sorted(GRAPH.items()) for target in sorted(targets)
               if stage(target) > stage(module)]
    assert not against, "imports against the data flow:\n" + "\n".join(against)


@pytest.mark.parametrize("package", ["agentrl.envs", "agentrl.agents"])
def test_envs_and_agents_take_only_the_leaves_from_the_core(package):
    outside = [f"{module} imports {target}" for module, targets in sorted(GRAPH.items())
               if module.startswith(package) for target in sorted(targets)
               if not target.startswith(package) and target not in LEAVES]
    assert not outside, "\n".join(outside)


def test_the_module_graph_has_no_cycles():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycles.append(" → ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("modules", [
    "agentrl.config, agentrl.records, agentrl.hardware, agentrl.errors, agentrl.registry",
    "agentrl.algos, agentrl.algos.scpo, agentrl.algos.gigpo, agentrl.algos.grpo, agentrl.algos.scorers, "
    "agentrl.algos.alignment",
    "agentrl.models.registry",
    "agentrl.envs, agentrl.agents",
    "agentrl.integrations, agentrl.integrations.steps",
])
def test_light_modules_import_no_torch(modules):
    code = f"import sys, {modules}; heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; print(heavy)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"importing {modules} pulled in {result.stdout.strip()}"


def test_every_module_is_in_a_stage_and_the_contract_sees_real_imports():
    for module in MODULES:
        stage(module)
    # The parser must see the edges the contract is about, or every test above would pass vacuously.
    assert "agentrl.policy" in GRAPH["agentrl.rollout"] or any(t.startswith("agentrl.policy")
                                                               for t in GRAPH["agentrl.rollout"])
    assert "agentrl.errors" in GRAPH["agentrl.envs.registration"]
    assert any(t.startswith("agentrl.algos") for t in GRAPH["agentrl.trainer"])
