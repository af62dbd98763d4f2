"""The ALFWorld engine: textworld 1.7's TextWorld-PDDL ``PddlEnv`` with fast-downward, wrapped by alfworld 0.4.2's
``AlfredDemangler`` and ``AlfredInfos`` (docs/spec/environments.md §3.3, §3.6), plus fast resets.

Why fast resets. ``PddlEnv.reset()`` rebuilds its ``PddlState`` from the PDDL text: fast-downward's Python translator
runs twice (once plain, once optimised for replanning) and the SAS task is loaded into the C++ library. The
translation is pure Python and is nearly all of the cost (about 0.4 + 0.45 s for a kitchen on one free core; several
seconds when the cores are contended), and ``load()`` has already done it once. Both depend only on the game file.

What :class:`ReusablePddlEnv` does instead. ``load()`` grounds a game once per process (:class:`Grounding`): it keeps
the loaded logic, entity names and the freshly built, never-stepped ``PddlState``, with its two SAS texts. A
``reset()`` then reloads the SAS texts into this env's own copy of the fast-downward library (a few ms; the C++ side
has no other way back to the initial state), copies the initial fact set, and returns the initial ``GameState``
computed by the first reset of that game in the process. Everything else is textworld's own code: steps, admissible
commands, the grammar, the replanner (which the expert runs on a goal-focused cut of the task, see
:meth:`ReusablePddlEnv.focused_policy_commands`). ``tests/test_alfworld.py`` checks that a fast reset gives
byte-identical observations and admissible commands to a cold ``PddlEnv.reset()`` and that walkthroughs still win
after it.

The library copy (``fast_downward.load_lib`` dlopens a private copy of ``libdownward.so``, 33 MB) holds the current
search state, so it stays per env; the grounding (about 7 MB for a kitchen) is shared by every env of the process.

Why memoized parses (:class:`MemoizedGrammar`). After every command, textworld lists the admissible commands by
deriving each applicable action's command template through its text grammar, and ``derive`` re-parses every
template string with tatsu (``textgen._parse_and_convert``), as do the grammar's conditions and ``{...|query}``
symbols (``Rule.parse_conjunctive_query``): about three quarters of a step's time went into re-parsing the same few
hundred strings. A parse is a pure function of the string, so each is parsed once per process and kept
(:class:`ParseMemo`, keyed by the exact string, one memo per parser, never handed out: the grammar gets a deep copy
of the parsed symbols, which ``derive`` mutates, and a new ``Rule`` around the parsed, immutable predicates). The
derivation itself is textworld 1.7.0's, step for step; ``tests/test_alfworld_parse_memo.py`` plays games with and
without the memo and compares every observation and admissible command.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.core import EnvInfos, GameState
from textworld.envs import PddlEnv
from textworld.envs.pddl import textgen
from textworld.logic import Rule
from textworld.utils import check_flag

#: What our env asks the engine for on every step. Planner commands are not requested here: the expert replans only
#: when the agent leaves its plan (:meth:`ReusablePddlEnv.focused_policy_commands`); replanning every step costs time.
REQUEST_INFOS: dict[str, Any] = {"won": True, "admissible_commands": True, "extras": ["gamefile"]}

DEFAULT_CACHE_SIZE = 32

#: The textworld release whose grammar derivation :class:`MemoizedGrammar` follows; with another one the engine
#: keeps textworld's own (unmemoized) grammar.
MEMO_TEXTWORLD_VERSION = "1.7.0"


class ParseMemo:
    """A thread-safe, bounded memo of one pure parse function: ``text -> parse(text)``.

    Keyed by the exact string (the parser itself is fixed per memo), so a hit is the parse of that very string. The
    stored values are never given out to code that could change them: see :class:`MemoizedGrammar`.
    """

    def __init__(self, parse: Any, maxsize: int = 16384):
        self.parse = parse
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> Any:
        if type(text) is not str:  # a str subclass could compare equal yet parse differently
            return self.parse(text)
        with self._lock:
            value = self._items.get(text, _MISSING)
            if value is not _MISSING:
                self._items.move_to_end(text)
                self.hits += 1
                return value
        value = self.parse(text)  # outside the lock: parsing takes milliseconds
        with self._lock:
            self.misses += 1
            self._items[text] = value
            while len(self._items) > max(1, self.maxsize):
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)


_MISSING = object()

#: textworld's template parser, bound at import.
_TEXTWORLD_PARSE = textgen._parse_and_convert
#: Template strings (``"go to {r.name}"``, ``"#intro#"``, ...) -> textworld's parsed symbol list.
TEMPLATE_PARSES = ParseMemo(lambda text: _TEXTWORLD_PARSE(text, rule_name="symbols"))
#: Conjunctive queries (``"in(o, r)"``) -> their parsed predicates (what ``Rule.parse_conjunctive_query`` wraps).
QUERY_PARSES = ParseMemo(lambda text: tuple(Rule.parse_conjunctive_query(text).preconditions))


def _template_symbols(text: str) -> list:
    """``textgen._parse_and_convert(text, rule_name="symbols")``, memoized: a deep copy of the one parse, since
    ``derive`` sets every symbol's context."""
    return copy.deepcopy(TEMPLATE_PARSES.get(text))


def _query_rule(expression: str) -> Rule:
    """``Rule.parse_conjunctive_query(expression)``, memoized: a new ``Rule`` (it carries a private cache) around
    the parsed predicates (values: hashable, never changed by textworld)."""
    return Rule("query", QUERY_PARSES.get(expression), [])


def _query(expression: str, context: dict) -> list[dict]:
    """textworld 1.7.0's ``textgen.query`` with the query parse memoized."""
    rule = _query_rule(expression)
    contexts = []
    for mapping in context["state"].all_assignments(rule, context["mapping"]):
        context_ = textgen.copy_context(context)
        new_variables = {ph.name: context_["entity_infos"][var.name] for ph, var in mapping.items()}
        context_["variables"].update(new_variables)
        context_["mapping"].update(mapping)
        contexts.append(context_)
    return contexts


def _derive_conditional(symbol: Any) -> list:
    """textworld 1.7.0's ``ConditionalSymbol.derive`` with the query parse memoized."""
    if len(symbol.context) == 0:
        raise ValueError("Empty context")
    context = textgen.copy_context(symbol.context)
    contexts = [context]
    if symbol.given:
        contexts = _query(symbol.given, context)
    return [symbol.expression.copy(context) for context in contexts]


def _derive_list(symbol: Any) -> list:
    """textworld 1.7.0's ``ListSymbol.derive()`` with the query parse memoized."""
    context = symbol.context
    symbol.symbol.context = context
    inner = symbol.symbol
    derivation = _derive_conditional(inner) if isinstance(inner, textgen.ConditionalSymbol) else inner.derive()
    return textgen.display_list(derivation, context)


class MemoizedGrammar(textgen.ContextSensitiveGrammar):
    """textworld's context-sensitive grammar, deriving exactly as textworld 1.7.0 does but with every template and
    query parse memoized (module docstring). Shares the production rules of the grammar it wraps (never changed
    after loading). With ``TW_CSG_TRACE`` or ``TW_CSG_DEBUG`` set, textworld's own code runs (it prints as it
    parses and derives)."""

    def __init__(self, grammar: textgen.ContextSensitiveGrammar):
        super().__init__()
        self._rules = grammar._rules

    def replace(self, start: Any) -> list:
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)
        for rule in rules:  # textworld takes the first applicable rule (IndexError if there is none)
            if not rule.condition or any(True for _ in start.context["state"].all_assignments(
                    _query_rule(rule.condition), start.context["mapping"])):
                break
        else:
            raise IndexError("list index out of range")
        symbols = copy.deepcopy(rule.rhs)
        for symbol in symbols:
            symbol.context = textgen.copy_context(start.context)
        return symbols

    def derive(self, start: str, context: dict | None = None) -> str:
        context = {} if context is None else context
        if check_flag("TW_CSG_TRACE") or check_flag("TW_CSG_DEBUG"):
            return textgen.ContextSensitiveGrammar.derive(self, start, context)
        derivation = _template_symbols(start)[::-1]  # reversed: a derivation stack
        for symbol in derivation:
            symbol.context = textgen.copy_context(context)
        derived = []
        while derivation:
            symbol = derivation.pop()
            if isinstance(symbol, textgen.TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, textgen.NonterminalSymbol):
                derivation += self.replace(symbol)[::-1]
            elif isinstance(symbol, textgen.ConditionalSymbol):
                derivation += _derive_conditional(symbol)[::-1]
            elif isinstance(symbol, textgen.ListSymbol):
                derivation += _derive_list(symbol)[::-1]
            elif isinstance(symbol, textgen.EvalSymbol):
                derivation += symbol.derive()[::-1]
            else:
                raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
        return "".join(map(str, derived))


def memoized_logic(logic: Any) -> Any:
    """A shallow copy of a textworld ``GameLogic`` whose grammar is a :class:`MemoizedGrammar` over the same rules
    (``logic`` itself unchanged); ``logic`` as is with another textworld release than the one followed."""
    if textworld.__version__ != MEMO_TEXTWORLD_VERSION or isinstance(logic.grammar, MemoizedGrammar):
        return logic
    out = copy.copy(logic)
    out.grammar = MemoizedGrammar(logic.grammar)
    return out


class Grounding:
    """One game, translated and grounded once: what every later episode of it starts from.

    Shared by all envs of a process and never mutated after the first reset fills :attr:`initial_game_state`.
    """

    def __init__(self, game_data: dict, logic: Any, entity_infos: dict, initial_state: Any):
        self.game_data = game_data
        self.logic = logic
        self.entity_infos = entity_infos
        self.initial_state = initial_state  # a PddlState right after construction: no action applied
        self.initial_state.downward_lib = None  # each env installs its own library copy
        self.sas = initial_state.sas.encode("utf-8")
        self.sas_replan = initial_state.sas_replan.encode("utf-8")
        # Filled by the first reset: the GameState that reset() returns and the applicable operators behind it,
        # per set of requested infos (they change what _gather_infos stores).
        self.initial_game_states: dict[tuple, tuple[GameState, dict]] = {}
        self._replan_operators: tuple[str, list[tuple[tuple[str, ...], str]], str] | None = None
        self._entity_ids_by_name: dict[str, str] | None = None
        self._memoized_logic: Any = None

    @property
    def memoized_logic(self) -> Any:
        """:attr:`logic` with a :class:`MemoizedGrammar` (:func:`memoized_logic`), made once."""
        if self._memoized_logic is None:
            self._memoized_logic = memoized_logic(self.logic)
        return self._memoized_logic

    @property
    def replan_operators(self) -> tuple[str, list[tuple[tuple[str, ...], str]], str]:
        """The game's full SAS task cut in three: the text before the operator count, the operators as
        ``(entity ids in the operator's name, text block)``, and the text after them (axioms).

        The full task, not textworld's optimised replanning task: the optimiser prunes operators by relevance from
        the initial state (it keeps "take the teddy bear" but drops "put it down"), so from states an agent reaches
        off the walkthrough it often has no plan at all. The full task shares the state variables of the library's
        current state, which the replanner starts from."""
        if self._replan_operators is None:
            sas = self.initial_state.sas
            first = sas.index("begin_operator\n")
            end = sas.rindex("end_operator\n") + len("end_operator\n")
            head = sas[:first].rstrip("\n").rsplit("\n", 1)[0] + "\n"  # drop the operator count line
            operators = []
            for block in sas[first:end].split("begin_operator\n")[1:]:
                name = block.split("\n", 1)[0]
                operators.append((tuple(name.split()[1:]), "begin_operator\n" + block))
            self._replan_operators = (head, operators, sas[end:])
        return self._replan_operators

    @property
    def entity_ids_by_name(self) -> dict[str, str]:
        """Demangled name (``desk 1``) -> PDDL id, for objects and receptacles."""
        if self._entity_ids_by_name is None:
            self._entity_ids_by_name = {
                info.name.strip(): key for key, info in self.entity_infos.items() if info.type in _PLACED_TYPES
            }
        return self._entity_ids_by_name

    def fresh_state(self, downward_lib: Any) -> Any:
        """A ``PddlState`` in the game's initial state, bound to ``downward_lib`` (which is reloaded to match)."""
        downward_lib.load_sas(self.sas)
        downward_lib.load_sas_replan(self.sas_replan)
        initial = self.initial_state
        state = copy.copy(initial)
        state.downward_lib = downward_lib
        # The four containers textworld.logic.State mutates (as State.copy() copies them; that method cannot be
        # used: it builds a plain State and wants a textworld.logic.GameLogic).
        state._facts = defaultdict(set, {sig: facts.copy() for sig, facts in initial._facts.items()})
        state._vars_by_name = dict(initial._vars_by_name)
        state._vars_by_type = defaultdict(set, {t: names.copy() for t, names in initial._vars_by_type.items()})
        state._var_counts = Counter(initial._var_counts)
        return state


class GroundingCache:
    """A process-wide LRU of :class:`Grounding` by game file. Thread-safe; grounding is serialised because
    fast-downward's translator keeps its options in module globals."""

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE):
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, Grounding] = OrderedDict()
        self.lock = threading.RLock()

    def get(self, key: str) -> Grounding | None:
        with self.lock:
            grounding = self._items.get(key)
            if grounding is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return grounding

    def put(self, key: str, grounding: Grounding) -> None:
        with self.lock:
            self._items[key] = grounding
            self._items.move_to_end(key)
            while len(self._items) > max(1, self.maxsize):
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self._items.clear()
            self.hits = self.misses = 0

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


#: The cache of this process, shared by every ALFWorld env in it.
GROUNDINGS = GroundingCache()


_PLACED_TYPES = ("object", "receptacle")
_FOCUS_TYPES = ("object", "receptacle", "location")


@contextlib.contextmanager
def _keeping_sys_argv():
    """fast-downward's translator overwrites ``sys.argv`` (it parses its options from there); give it back."""
    original, contents = sys.argv, list(sys.argv)
    try:
        yield
    finally:
        original[:] = contents
        sys.argv = original


def _infos_key(infos: EnvInfos) -> tuple:
    return tuple(infos.basics) + tuple(sorted(infos.extras))


class ReusablePddlEnv(PddlEnv):
    """textworld's ``PddlEnv`` that grounds each game once per process and restarts it from the saved initial state.

    Args:
        infos: what to put in each ``GameState`` (textworld's ``EnvInfos``).
        reuse: False gives textworld's own behaviour (translate on every ``load`` and ``reset``), for comparisons.
        cache: where groundings are kept (default: the process-wide :data:`GROUNDINGS`).
        memoize_parses: derive texts through a :class:`MemoizedGrammar` (default); False keeps textworld's grammar,
            which re-parses every template on every step (the same texts, slower; for comparisons).
    """

    def __init__(self, infos: EnvInfos | None = None, *, reuse: bool = True, cache: GroundingCache | None = None,
                 memoize_parses: bool = True):
        super().__init__(infos)
        self.reuse = reuse
        self.cache = GROUNDINGS if cache is None else cache
        self.memoize_parses = memoize_parses
        self._grounding: Grounding | None = None

    def load(self, filename: str) -> None:
        if not self.reuse:
            with _keeping_sys_argv():
                super().load(filename)
            if self.memoize_parses:
                self._logic = memoized_logic(self._logic)
            return
        with self.cache.lock:
            grounding = self.cache.get(filename)
            if grounding is None:
                with _keeping_sys_argv():
                    super().load(filename)  # translates and grounds: the expensive part, once per process
                grounding = Grounding(self._game_data, self._logic, self._entity_infos, self._pddl_state)
                self.cache.put(filename, grounding)
        self._game_file = filename
        self._game_data = grounding.game_data
        self.walkthrough = grounding.game_data.get("walkthrough")
        self._logic = grounding.memoized_logic if self.memoize_parses else grounding.logic
        self._entity_infos = grounding.entity_infos
        self._pddl_state = None
        self._grounding = grounding

    def reset(self) -> GameState:
        if not self.reuse:
            with _keeping_sys_argv():
                return super().reset()
        if self._grounding is None:
            raise RuntimeError("call load() before reset()")
        grounding = self._grounding
        self._pddl_state = grounding.fresh_state(self.downward_lib)
        self.prev_state = None
        self._last_action = None
        self._moves = 0
        key = _infos_key(self.request_infos)
        cached = grounding.initial_game_states.get(key)
        if cached is not None:
            initial, operators = cached
            self._pddl_state._operators = operators  # what all_applicable_actions() computed for the initial state
            self.state = GameState(initial)  # a shallow copy: wrappers add keys to the state they return
            return self.state
        # First reset of this game in the process: the tail of PddlEnv.reset(), after its PddlState construction.
        self.state = GameState()
        context = {
            "state": self._pddl_state,
            "facts": list(self._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": self._entity_infos,
        }
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        if "walkthrough" in self.request_infos.extras:
            self.state["extra.walkthrough"] = self.walkthrough or self._pddl_state.replan(self._entity_infos)
        grounding.initial_game_states[key] = (GameState(self.state), self._pddl_state._operators)
        return self.state

    # ---------------------------------------------------------------- what the agentrl env reads on demand
    def policy_commands(self) -> list[str]:
        """A fast-downward plan from the current state: textworld's ``policy_commands``, computed only when asked.

        The library's replanner is a blind (uniform-cost) search over the whole room: on this machine, plans of
        4-5 steps take milliseconds, 6-7 steps 0.5-7 s in kitchens, and 8 steps (two-object tasks) over five
        minutes. Prefer :meth:`focused_policy_commands`.
        """
        return self._pddl_state.replan(self._entity_infos)

    def focused_policy_commands(self, hints: Sequence[str]) -> list[str]:
        """A fast-downward plan from the current state, searched over the entities that matter only.

        The entities: those named in ``hints`` (the walkthrough's commands), the objects of the hinted objects' types
        that lie where the agent stands (another mug right here beats walking to the walkthrough's), the objects the
        agent holds, the receptacles that hold any of these objects now or held them at the start, and the
        locations of all these receptacles and of the agent. The same replanner then runs on the planning task
        restricted to the operators over these entities, which takes tens of milliseconds where the whole room can
        take minutes. A plan it finds is a plan of the full game (the same state, a subset of its operators); ``[]``
        if there is none.

        The search is uniform-cost (a lazy best-first search on the path cost; every action costs 1), so the plan
        is a shortest one of the restricted task. It was also a shortest one of the full game on all 450 states of
        the eval games checked (distance at most 5, where the full search is affordable; starts, plan prefixes and
        random detours). Without the objects where the agent stands, 5 of 271 detour states got a plan one step
        longer than the shortest (the agent stood at another object of the goal's type).
        """
        grounding = self._grounding
        if grounding is None:
            raise RuntimeError("focused planning needs a game loaded with reuse=True")
        state, kinds = self._pddl_state, self._pddl_state.name2type
        ids_by_name = grounding.entity_ids_by_name
        focus = {ids_by_name[name] for name in _names_in(hints, ids_by_name)}
        now = [(f.name, [v.name for v in f.arguments]) for f in state.facts if not f.name.startswith("not_")]
        at_start = [(f.name, [v.name for v in f.arguments]) for f in grounding.initial_state.facts]
        here = {args[1] for name, args in now if name == "atlocation"}
        near = {args[0] for name, args in now if name == "receptacleatlocation" and args[1] in here}
        object_type = {args[0]: args[1] for name, args in now if name == "objecttype"}
        wanted = {object_type[i] for i in focus if i in object_type}
        focus |= {args[0] for name, args in now
                  if name == "inreceptacle" and args[1] in near and object_type.get(args[0]) in wanted}
        focus |= {args[1] for name, args in now if name == "holds"}
        focus |= {args[1] for name, args in now + at_start if name == "inreceptacle" and args[0] in focus}
        focus |= {args[1] for name, args in now if name == "receptacleatlocation" and args[0] in focus}
        focus |= here
        head, operators, tail = grounding.replan_operators
        kept = [block for ids, block in operators if all(i in focus for i in ids if kinds.get(i) in _FOCUS_TYPES)]
        restricted = f"{head}{len(kept)}\n{''.join(kept)}{tail}"
        self.downward_lib.load_sas_replan(restricted.encode("utf-8"))
        try:
            return state.replan(self._entity_infos)
        finally:
            self.downward_lib.load_sas_replan(grounding.sas_replan)

    def true_facts(self) -> list[tuple[str, tuple[str, ...]]]:
        """The facts that hold now, as ``(predicate, entity names)`` with demangled names (``mug 1``)."""
        infos = self._entity_infos
        out = []
        for fact in self._pddl_state.facts:
            if fact.name.startswith("not_"):  # PddlState also records negated effects; they are not state
                continue
            out.append((fact.name, tuple(infos[v.name].name.strip() if v.name in infos else v.name
                                         for v in fact.arguments)))
        return out

    def close(self) -> None:
        lib = self.__dict__.pop("downward_lib", None)
        if lib is not None:
            # Frees this copy's search state. Not fast_downward.close_lib(): unloading one copy of the library makes
            # the next load of another copy crash the process (seen in our tests), so the mapping stays.
            lib.cleanup()


def _names_in(commands: Sequence[str], names: Iterable[str]) -> set[str]:
    """The entity names (``desk 1``, not ``desk 10``) that occur in any of ``commands``."""
    text = "\n".join(f" {c} " for c in commands)
    return {name for name in names if f" {name} " in text}


def make_engine(*, reuse: bool = True, cache: GroundingCache | None = None, memoize_parses: bool = True) -> Any:
    """The wrapped engine our env drives: ``AlfredInfos(AlfredDemangler(ReusablePddlEnv))``, as ``AlfredTWEnv``
    builds it for evaluation (no name shuffling)."""
    engine = ReusablePddlEnv(textworld.EnvInfos(**REQUEST_INFOS), reuse=reuse, cache=cache,
                             memoize_parses=memoize_parses)
    return AlfredInfos(AlfredDemangler(engine, shuffle=False))
