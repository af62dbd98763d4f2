"""The packaged policy's model card (``README.md``) and stage ``card``.

:func:`model_card` renders the card from a build record (``agentrl.json``) and the eval results; stage ``card`` (not
part of a build: run it by name) adds results measured later on the packaged weights (``--stages eval
--eval-packaged --eval-jobs ...``, in ``<work>/eval-packaged``) to the packaged policy's ``agentrl.json`` and renders
its card again, without the build cache that made it.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from .common import log
from .evaluate import eval_rows, packaged_results_dir


def _success_cell(cell: dict) -> str:
    """``12.5% (5/40)`` from an eval report's ``by_type`` entry (success in percent, episode count)."""
    return f"{cell['success']:.1f}% ({round(cell['success'] * cell['n'] / 100)}/{cell['n']:.0f})"


def _results_table(rows: dict[str, dict]) -> list[str]:
    """Markdown: ALFWorld success per task type, one line per (split, agent)."""
    types = ["Pick", "Look", "Clean", "Heat", "Cool", "Pick2"]
    lines = ["| split | agent | " + " | ".join(types) + " | All |", "|---|---|" + "---|" * (len(types) + 1)]
    labels = {"greedy": "this policy, best admissible action (greedy)",
              "score": "this policy, admissible action sampled at T=0.4",
              "generate": "this policy, free generation (greedy)",
              "random": "random admissible action", "expert": "expert (walkthrough + planner)"}
    for split, split_name in (("unseen", "eval_out_of_distribution (valid_unseen)"),
                              ("seen", "eval_in_distribution (valid_seen)")):
        for agent in ("greedy", "score", "generate", "random", "expert"):
            row = rows.get(f"alfworld-{split}-{agent}")
            if row is None:
                continue
            by_type = row["by_type"]
            cells = [_success_cell(by_type[t]) if t in by_type else "–" for t in types + ["All"]]
            lines.append(f"| {split_name} | {labels[agent]} | " + " | ".join(cells) + " |")
    return lines


def card_result(row: dict) -> dict:
    """What ``agentrl.json`` keeps of an eval job's result."""
    return {"split": row["split"], "agent": row["agent"], "by_type": row["by_type"]}


def _paragraph(text: str) -> str:
    """One paragraph of the model card, wrapped at 118 columns as the repository's Markdown is."""
    return textwrap.fill(text, width=118, break_on_hyphens=False, break_long_words=False)


def _free_generation_text(rows: dict[str, dict]) -> str:
    """What the card says of free generation (``agent.mode: generate``), from its measurement where there is one."""
    generate = rows.get("alfworld-unseen-generate", {}).get("by_type", {}).get("All")
    best = rows.get("alfworld-unseen-greedy", {}).get("by_type", {}).get("All")
    if generate is None:
        return "Free generation (`agent.mode: generate`) runs too; it is not measured here."
    if best is not None and generate["success"] < best["success"] / 2:
        return ("Free generation (`agent.mode: generate`) runs but plays far worse (below): the model ranks the "
                "admissible actions better than it spells one out, so keep `agent.mode: score`.")
    return "Free generation (`agent.mode: generate`) works too and is measured below."


def limitations(rows: dict[str, dict], dagger: bool) -> str:
    ways = {"greedy": "choosing the best admissible action", "score": "sampling at T=0.4",
            "generate": "by free generation"}
    measured = []
    for agent in ("greedy", "score", "generate"):
        cell = rows.get(f"alfworld-unseen-{agent}", {}).get("by_type", {}).get("All")
        if cell:
            measured.append(f"{_success_cell(cell)} {ways[agent]}")
    summary = f"In closed loop it wins {', '.join(measured)} of the valid_unseen games. " if measured else ""
    states = ("It was trained on the states the expert's episodes reach (with searches and detours) and, by DAgger, "
              "on states its own play reached" if dagger else
              "It was trained only on states the expert's episodes reach (with searches and detours), never on the "
              "states its own mistakes lead to")
    return (f"{summary}The issue's first recipe (3.4M parameters, 3.5k steps) reached 31% choosing the best "
            "admissible action and 11% by free generation on 36 of these games. A policy this small imitates; it "
            f"does not reason. {states}. It does not reliably read which object the task names: where that object "
            "is in sight among others it often takes another one, and it does not always find it. "
            "`bench/alfworld_choices.py --closed-loop` sorts a policy's failed episodes by the first thing that went "
            "wrong. It has seen few WebShop pages, TextWorld games and Crafting tasks. It makes the main job run end "
            "to end on a CPU with a trained policy.")


def _dagger_text(build: dict, before: dict[str, dict]) -> str:
    """The model card's DAgger paragraph and the SFT model's results before it ('' when the build had no DAgger)."""
    rounds = build.get("dagger")
    if not rounds:
        return ""
    lines = []
    for r in rounds:
        collect = r["collect"].values()
        won = [sum(part.get(f"won_T{t}", 0) for part in collect) for t in ("0", "0.4")]
        (epoch,) = r["epochs"]
        lines.append(f"| {r['round']} | {r['from']} | {sum(part['games'] for part in collect)} | {won[0]} / {won[1]} "
                     f"| {max(part['seconds'] for part in collect) / 60:.0f} | {r['dagger_rows']} + {r['replay_rows']} "
                     f"| {r['seconds'] / 60:.0f} | {epoch['val_loss']:.4f} |")
    table = "\n".join(_results_table(before)) if before else "(not measured)"
    sft_epochs = build["train"]["epochs"]
    validation = (f"Validation loss on the same held-out games (the SFT model's: {sft_epochs[-1]['val_loss']:.4f})"
                  if sft_epochs else "Validation loss on held-out games of this build's demonstrations")
    return f"""
Then DAgger (Ross et al. 2011), {len(rounds)} round(s) (`--dagger-rounds`). Each round the current policy played the
train games (not the validation ones) in {len(rounds[0]['collect'])} processes for a fixed time, each game once
choosing its best admissible action and once sampling at T=0.4, an episode ending once the policy had made the
same move from the same observation 3 times; every state it reached was labelled by an expert that sees what the
agent sees: until the task's object had been in sight, open the receptacle it stands at if closed, else the policy's
own move if it went to a receptacle not yet visited where that object is found in the train games, else the next
such receptacle, most likely first (the search prior); from then on the engine's planner. The
policy was then fine-tuned for one epoch (AdamW at {rounds[-1]['lr']:g}, cosine) on the labelled states of all
rounds so far plus a replay of the demonstrations above, so that it keeps the other envs and the expert's own
states. {validation}:

| round | policy played | games | won (greedy / T=0.4) | minutes playing | rows fine-tuned on (DAgger + replay) | minutes fine-tuning | validation loss |
|---|---|---|---|---|---|---|---|
{chr(10).join(lines)}

The SFT model before DAgger, measured the same way:

{table}
"""


def _loss_text(train: dict) -> str:
    """The SFT loss of ``train`` (``stage_train``'s report) in words."""
    candidates = ("all the admissible actions" if train["max_candidates"] <= 0 else
                  f"the expert's and {train['max_candidates'] - 1} other admissible actions drawn at random"
                  + (", first among those with the expert's command word" if train.get("hard_negatives") else ""))
    choice = f"−log softmax of the expert's reply among the state's candidate replies ({candidates})"
    reply = "the expert reply's per-token NLL"
    return {"score": choice, "generate": reply, "both": f"{choice}, plus {reply}"}[train["mode"]]


def _continued_text(build: dict, new_games: int) -> str:
    """The model card's paragraph on the build this one continued (``--init-from``) with ``new_games`` more ALFWorld
    games; '' when trained from a new Llama."""
    earlier = build.get("continued_from")
    if not earlier:
        return ""
    train = earlier["train"]
    text = (f"This build continued an earlier one: the agentrl-tiny built on {earlier['built']} by "
            f"`{earlier['command']}` ({earlier['alfworld_train_games']} ALFWorld train games, "
            f"{train['train_demos']} demonstrations, {len(train['epochs'])} epoch(s) in {train['seconds'] / 60:.0f} "
            f"minutes, validation loss {train['epochs'][-1]['val_loss']:.4f}), trained here from its weights and "
            f"with its tokenizer on the demonstrations below: {new_games} further ALFWorld train games, the next in "
            f"the same balanced order (`--alfworld-skip-games`), so that no game is trained on twice, and the other "
            f"envs' again. {build['alfworld_train_games']} ALFWorld train games in all.")
    return _paragraph(text) + "\n\n"


def _kept_text(build: dict, new_games: int) -> str:
    """The model card's paragraph on a build that kept the model it started from (``--init-from`` with ``--epochs
    0``) and ran DAgger on it, playing and replaying ``new_games`` ALFWorld train games that model had not seen."""
    earlier = build["continued_from"]
    data = ", ".join(f"{name} {part.get('demos', '?')}" for name, part in build["data"].items())
    text = (f"This build kept the weights and tokenizer of the agentrl-tiny built on {earlier['built']} by "
            f"`{earlier['command']}` (`--init-from` with `--epochs 0`: no SFT here) and ran DAgger on them "
            f"(below) in {new_games} ALFWorld train games that model had not seen (the next in the same balanced "
            f"order, `--alfworld-skip-games`): it played as many of them as its time allowed and replayed expert "
            f"demonstrations of them and of the other envs ({data}). {build['alfworld_train_games']} ALFWorld "
            f"train games in all. That earlier build's SFT:")
    return _paragraph(text) + "\n\n"


def _other_envs_lines(rows: dict[str, dict]) -> list[str]:
    """Markdown rows: success on WebShop, Crafting and TextWorld, this policy against a random agent."""
    other = []
    for env_name, split_label in (("webshop", "eval goals"), ("crafting", "eval_in_distribution"),
                                  ("textworld", "held-out games")):
        cells = [f"{rows[f'{env_name}-{agent}']['by_type']['All']['success']:.1f}%"
                 if f"{env_name}-{agent}" in rows else "–" for agent in ("score", "random")]
        if any(cell != "–" for cell in cells):
            n = rows.get(f"{env_name}-score", rows.get(f"{env_name}-random"))["by_type"]["All"]["n"]
            other.append(f"| {env_name} | {split_label} ({n:.0f}) | " + " | ".join(cells) + " |")
    return other


def _data_text(sft: dict, sft_games: int) -> str:
    """The card's paragraph on the demonstrations of the build that ran the SFT (``sft``)."""
    parts = [part for name, part in sft["data"].items() if name.startswith("alfworld")]
    observable = any(part.get("labels") == "observable" for part in parts)
    kind_texts = {
        "walk": "the walkthrough (the engine's plan from the start: straight to where the object is)",
        "search": "a search episode (visit the receptacles where the task's object is most often found in the "
                  "train walkthroughs, opening closed ones, until it is in sight, then the engine's planner)",
        "detour": "a detour episode (the same search with random harmless actions now and then)" if observable else
                  "a detour episode (random harmless actions now and then, every state labelled with the planner's "
                  "way back)"}
    played = [text for kind, text in kind_texts.items() if any(f"{kind}_won" in part for part in parts)]
    episodes_each = f"{['one', 'two', 'three'][len(played) - 1]} episode{'s' * (len(played) > 1)} each:"
    episodes_text = "; ".join(played) + (
        "; every state of the search and detour episodes labelled by what an expert that sees only what the agent "
        "sees would do (`SearchingExpert`: the search until the object is in sight, then the planner)."
        if observable else ".")
    return _paragraph(
        f"Data (one row per part: demonstrations, games or episodes). ALFWorld: {sft_games} train games, "
        f"{episodes_each} {episodes_text} 5% of the games are held out for the validation loss.")


def _drive_text(build: dict, rows: dict[str, dict]) -> str:
    """The card's paragraph on the agent settings the policy is driven with."""
    listing = ("" if build["agent"].get("list_actions", True) else
               " no list of the admissible actions in the prompt (`agent.list_actions: false`),")
    return _paragraph(
        "Drive it as it was trained: ReAct prompts with no `<think>` block (`agent.think: false`), history "
        f"{build['agent']['history_length']} with the actions of up to {build['agent'].get('action_memory', 0)} older "
        f"steps in one line (`agent.action_memory`),{listing} and choosing among the admissible actions by their "
        "likelihood (`agent.mode: score`); these settings are in `agentrl.json`, and `agentrl train` and `agentrl "
        f"eval` apply them to this model. {_free_generation_text(rows)}")


def _packaged_text(rows: dict[str, dict]) -> str:
    """The card's note on the results measured on the packaged bf16 weights ('' when there are none)."""
    # Scripted agents' rows do not depend on the weights, whenever they were measured.
    packaged = sorted(name for name, r in rows.items()
                      if r.get("weights") == "packaged" and r.get("agent") not in ("random", "expert"))
    return ("" if not packaged else "\n\n" + _paragraph(
        "Most results below were measured on the float32 model before it was stored in bf16; these on the packaged "
        "bf16 weights, after the build (the `card` stage): " + ", ".join(f"`{name}`" for name in packaged) + "."))


def _training_text(train: dict) -> str:
    """The card's paragraph on the SFT (``stage_train``'s report)."""
    precision = "bf16 autocast" if train["bf16_autocast"] else "float32 (this CPU has no native bf16)"
    return _paragraph(
        f"Training: `agentrl.sft` mode `{train['mode']}` ({_loss_text(train)}), {train['train_demos']} demonstrations "
        f"({train['tokens_per_epoch'] / 1e6:.1f}M prompt + reply tokens per epoch), AdamW at {train['lr']:g} with a "
        f"cosine schedule, batch {train['batch_size']}, {precision}, {train['threads']} thread(s), "
        f"{train['seconds'] / 60:.0f} minutes.")


def model_card(build: dict, rows: dict[str, dict], before: dict[str, dict] | None = None) -> str:
    arch = build["architecture"]
    # A build that kept the model it started from (--init-from, --epochs 0) and only ran DAgger on it: its SFT is
    # the earlier build's, described from that build's record.
    kept = not build["train"]["epochs"] and "continued_from" in build
    sft = build["continued_from"] if kept else build
    train = sft["train"]
    epochs = "\n".join(f"| {e['epoch']} | {e['train_loss']:.4f} | {e['val_loss']:.4f} | {e['seconds'] / 60:.1f} |"
                        for e in train["epochs"])
    data_lines = "\n".join(f"| {k} | {v.get('demos', '?')} | {v.get('games', v.get('episodes', '?'))} |"
                            for k, v in sft["data"].items())
    this_build_games = build["alfworld_train_games"] - build.get("continued_from", {}).get("alfworld_train_games", 0)
    sft_games = sft["alfworld_train_games"] - sft.get("continued_from", {}).get("alfworld_train_games", 0)
    return f"""# agentrl-tiny: the embedded default CPU policy

{_paragraph(
    f"A {arch['parameters'] / 1e6:.1f}M-parameter Llama ({arch['layers']} layers, hidden {arch['hidden']}, MLP "
    f"{arch['intermediate']}, tied embeddings) with a {arch['vocab']}-token byte-level BPE, trained from scratch by "
    "supervised fine-tuning on expert trajectories of agentrl's own environments. Stored as bf16 safetensors. It is "
    "`agentrl train`'s default `--model` on a CPU, so the main job runs and learns with no model hub; on a GPU pass a "
    "real model (for example Qwen2.5-1.5B-Instruct).")}

{_drive_text(build, rows)}{_packaged_text(rows)}

## Results

One episode per game, seed {build['seed']}, three ways of driving the same weights: the best admissible action
(greedy scoring: the highest likelihood among the admissible actions' replies, how the issue's reference numbers
were measured), an admissible action sampled from that softmax at temperature 0.4 (what `agentrl train` evaluates
and explores with), and free generation of the reply (greedy), whose text must then name an admissible action.

{chr(10).join(_results_table(rows))}

The random and expert rows do not depend on the model (scripted agents, seed {build['seed']}).

| env | split (episodes) | this policy (admissible action sampled at T=0.4) | random admissible action |
|---|---|---|---|
{chr(10).join(_other_envs_lines(rows))}

## How it was built

`{build['command']}` (seeded; every stage cached under `runs/default-policy/`), on a machine with
{build['machine']}, {build['built']}.

{_kept_text(build, this_build_games) if kept else ""}{_continued_text(sft, sft_games)}{_data_text(sft, sft_games)}

| part | demonstrations | games / episodes |
|---|---|---|
{data_lines}

{_training_text(train)}

| epoch | train loss | validation loss | minutes |
|---|---|---|---|
{epochs}
{_dagger_text(build, before or {})}
## Limitations

{_paragraph(limitations(rows, bool(build.get("dagger"))))}
"""


def stage_card(args: argparse.Namespace, work: Path) -> None:
    """Refresh the packaged policy's results and card without rebuilding it (its build cache may be gone): the
    results of the jobs run on the packaged weights (``--stages eval --eval-packaged``, in ``<work>/eval-packaged``)
    are added to those in its ``agentrl.json``, replacing a job of the same name, and ``README.md`` is rendered
    again from it. The weights are not touched."""
    path = args.out / "agentrl.json"
    if not path.is_file():
        raise SystemExit(f"card: no packaged policy in {args.out} ({path.name} missing)")
    build = json.loads(path.read_text())
    folder = packaged_results_dir(work)
    fresh = {**eval_rows(folder, model_agents=False), **eval_rows(folder, model_agents=True)}
    if not fresh:
        raise SystemExit(f"card: no results in {folder}; run --stages eval --eval-packaged first")
    build["results"].update({name: {**card_result(r), "weights": "packaged"} for name, r in fresh.items()})
    path.write_text(json.dumps(build, indent=1))
    (args.out / "README.md").write_text(model_card(build, build["results"], build.get("results_before_dagger")))
    log(f"card: {len(fresh)} result(s) from {folder} in {args.out}: {', '.join(sorted(fresh))}")
