"""bench/drift_quality: how well drift detection segments human-labelled dialogues.

For every dialogue of the given files (the format: README.md, "Drift detection quality") it
replays the production pipeline against the configured provider (`make_llm`; with no
OPENAI_API_KEY that is the offline `local` one), in two modes:

- `detector`: an evaluation after every message (interval 1), the detector alone;
- `pipeline`: an evaluation each time the active topic's message count reaches a
  multiple of DRIFTLESS_DRIFT_INTERVAL (R26), as the message-send handler does.

An evaluation builds its request and reads the answer only through
`shared.drift.rules`, as the worker does: a drift forks the messages from
`first_message_id` on into a new topic; no drift refreshes the topic's title and summary
in place (R30). The predicted topic boundaries are scored against the reference with
Pk and WindowDiff (lower is better), per dialogue, then averaged.

    .venv/bin/python bench/drift_quality.py [--limit N] FILE...
    .venv/bin/python -m bench.drift_quality [--limit N] FILE...

The last line is machine-readable:
`pk=<float> wd=<float> pipeline_pk=<float> pipeline_wd=<float>`, averaged over all
dialogues of all files (`pk`/`wd` are the detector mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

if __package__ in (None, ""):  # run as a script path: make `shared` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.drift.rules import build_drift_request, parse_drift_answer
from shared.infra.config import load_settings
from shared.llm.base import LLM, LLMError, SummaryRequest, TranscriptLine
from shared.llm.factory import make_llm
from shared.summaries.rules import parse_summary_answer

# --- metrics (the definitions of the `segeval` package) --------------------------------


def window_size(reference: Sequence[int]) -> int:
    """k = half the mean reference segment length, rounded (half to even, as Python's and
    segeval's `round`), and at least 2."""
    k = round(Fraction(sum(reference), len(reference)) / 2)
    return k if k > 1 else 2


def _labels(masses: Sequence[int]) -> list[int]:
    """The segment index of every unit: [2, 3] -> [0, 0, 1, 1, 1]."""
    return [segment for segment, mass in enumerate(masses) for _ in range(mass)]


def _check(hypothesis: Sequence[int], reference: Sequence[int]) -> None:
    if sum(hypothesis) != sum(reference) or min(hypothesis, default=1) < 1:
        raise ValueError(f"segmentations differ: {list(hypothesis)} vs {list(reference)}")


def _disagreement(
    hypothesis: Sequence[int],
    reference: Sequence[int],
    k: int | None,
    probe: Callable[[list[int], int, int], object],
) -> float:
    """The share of windows (i, i+k) on which `probe` differs between the segmentations
    (0.0 when no window fits, as in segeval)."""
    _check(hypothesis, reference)
    k = window_size(reference) if k is None else k
    ref, hyp = _labels(reference), _labels(hypothesis)
    windows = len(ref) - k
    if windows <= 0:
        return 0.0
    return sum(probe(ref, i, k) != probe(hyp, i, k) for i in range(windows)) / windows


def pk(hypothesis: Sequence[int], reference: Sequence[int], k: int | None = None) -> float:
    """Pk (Beeferman et al. 1999) of segment lengths `hypothesis` against `reference`.

    With N units, labels ref(i) / hyp(i) (the segment each unit is in) and window k:

        Pk = (1 / (N - k)) * sum_{i=0}^{N-k-1} [ (ref(i) == ref(i+k)) != (hyp(i) == hyp(i+k)) ]

    i.e. the share of probes (i, i+k) on which the two segmentations disagree about
    "same segment". 0.0 when N <= k (no probe fits), as in segeval.
    """
    return _disagreement(hypothesis, reference, k, lambda labels, i, k: labels[i] == labels[i + k])


def window_diff(hypothesis: Sequence[int], reference: Sequence[int], k: int | None = None) -> float:
    """WindowDiff (Pevzner & Hearst 2002), without the Lamprier et al. padding.

    With b(i) = the number of boundaries between units i and i+k (= label(i+k) - label(i),
    since labels count segments):

        WD = (1 / (N - k)) * sum_{i=0}^{N-k-1} [ b_ref(i) != b_hyp(i) ]

    Unlike Pk it also counts a window holding two boundaries where the reference has one.
    """
    return _disagreement(hypothesis, reference, k, lambda labels, i, k: labels[i + k] - labels[i])


def masses(boundaries: Sequence[int], length: int) -> list[int]:
    """Segment lengths from the indexes where segments start (0 is implied)."""
    starts = sorted({0, *boundaries})
    return [end - start for start, end in zip(starts, [*starts[1:], length], strict=True)]


# --- the pipeline, replayed -----------------------------------------------------------


@dataclass(frozen=True)
class Segmented:
    boundaries: list[int]  # indexes of the first utterance of each new topic
    calls: int  # LLM calls: drift detections plus in-place refreshes


def _refresh(llm: LLM, topic: Sequence[TranscriptLine]) -> tuple[str, str] | None:
    """The topic's new (title, summary), or None to keep the old ones (R30)."""
    try:
        parsed = parse_summary_answer(llm.summarize(SummaryRequest(lines=list(topic))).text)
    except LLMError:
        return None
    return (parsed.title, parsed.summary) if parsed else None


def segment(llm: LLM, utterances: Sequence[str], *, interval: int, scan_back: int) -> Segmented:
    """Replay one dialogue through drift evaluations as the message-send handler runs them."""
    lines = [
        TranscriptLine(id=index + 1, role="user" if index % 2 == 0 else "assistant", content=text)
        for index, text in enumerate(utterances)
    ]
    topic: list[TranscriptLine] = []
    title: str | None = None
    summary: str | None = None
    boundaries: list[int] = []
    calls = 0
    for line in lines:
        topic.append(line)
        if len(topic) % interval:
            continue
        request = build_drift_request(
            topic_title=title, topic_summary=summary, recent=topic, scan_back=scan_back
        )
        calls += 1
        try:
            decision = parse_drift_answer(llm.detect_drift(request).text, request)
        except LLMError:
            decision = None
        if decision is not None:
            cut = next(i for i, m in enumerate(topic) if m.id == decision.first_message_id)
            topic = topic[cut:]
            title, summary = decision.new_title, None
            boundaries.append(decision.first_message_id - 1)
            continue
        calls += 1
        refreshed = _refresh(llm, topic)
        if refreshed is not None:
            title, summary = refreshed
    return Segmented(boundaries=boundaries, calls=calls)


@dataclass(frozen=True)
class Dialogue:
    utterances: list[str]
    segments: list[int]  # reference: lengths of consecutive same-topic runs


def load_dialogues(path: Path, limit: int | None = None) -> list[Dialogue]:
    """The file's dialogues (format: README.md, "Drift detection quality")."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    dialogues = [
        Dialogue([str(u) for u in item["utterances"]], [int(n) for n in item["segments"]])
        for item in raw[:limit]
    ]
    for dialogue in dialogues:
        _check(dialogue.segments, [len(dialogue.utterances)])
    return dialogues


@dataclass(frozen=True)
class Score:
    pk: float
    wd: float
    predicted: int  # segments
    reference: int
    calls: int


def score_dialogues(
    llm: LLM, dialogues: Sequence[Dialogue], *, interval: int, scan_back: int
) -> list[Score]:
    scores = []
    for dialogue in dialogues:
        result = segment(llm, dialogue.utterances, interval=interval, scan_back=scan_back)
        hypothesis = masses(result.boundaries, len(dialogue.utterances))
        scores.append(
            Score(
                pk=pk(hypothesis, dialogue.segments),
                wd=window_diff(hypothesis, dialogue.segments),
                predicted=len(hypothesis),
                reference=len(dialogue.segments),
                calls=result.calls,
            )
        )
    return scores


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pk / WindowDiff of drift detection.")
    parser.add_argument("files", nargs="+", type=Path, help="topic-segmentation JSON files")
    parser.add_argument("--limit", type=int, default=None, help="first N dialogues per file")
    args = parser.parse_args(argv)
    settings = load_settings()
    llm = make_llm(settings)
    modes = {"detector": 1, "pipeline": settings.drift_interval}
    print(f"provider {llm.model}  drift_interval {settings.drift_interval}", end="")
    print(f"  scan_back {settings.scan_back}")
    everything: dict[str, list[Score]] = {mode: [] for mode in modes}
    for path in args.files:
        dialogues = load_dialogues(path, args.limit)
        for mode, interval in modes.items():
            started = time.perf_counter()
            scores = score_dialogues(
                llm, dialogues, interval=interval, scan_back=settings.scan_back
            )
            elapsed = time.perf_counter() - started
            everything[mode] += scores
            print(
                f"{path.name:<24} {mode:<8} (interval {interval:>2})  dialogues {len(scores):>4}"
                f"  Pk {_mean([s.pk for s in scores]):.4f}"
                f"  WD {_mean([s.wd for s in scores]):.4f}"
                f"  segments {_mean([s.predicted for s in scores]):5.2f}"
                f" vs {_mean([s.reference for s in scores]):5.2f}"
                f"  LLM calls {sum(s.calls for s in scores):>6}  {elapsed:6.2f} s"
            )
    detector, pipeline = everything["detector"], everything["pipeline"]
    print(
        f"pk={_mean([s.pk for s in detector]):.4f} wd={_mean([s.wd for s in detector]):.4f}"
        f" pipeline_pk={_mean([s.pk for s in pipeline]):.4f}"
        f" pipeline_wd={_mean([s.wd for s in pipeline]):.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
