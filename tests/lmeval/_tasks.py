"""Small synthetic lm-eval tasks over local JSONL files, written by the tests (no shared task text).

``write_tasks(folder)`` writes one YAML per task (``dataset_path: json`` + ``data_files``) and
their data, for lm-eval's ``--include_path``: arithmetic multiple choice (ARC-style prompt, 0-shot),
sentence endings (HellaSwag-style, 3-shot in its YAML), a language-modelling text (``loglikelihood_rolling``) and
short-answer generation (``generate_until``). Items are generated from a seeded RNG.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emil", "Fatima", "Goran", "Hana")
PLACES = ("the market", "the library", "the river", "the station", "the garden", "the bakery")
ACTIONS = (("buys some bread", "eats the bread"), ("opens a book", "reads a page"),
           ("picks up the keys", "locks the door"), ("fills a glass", "drinks the water"),
           ("puts on a coat", "walks outside"), ("turns on the oven", "bakes a cake"))


def _mc_items(rng: random.Random, n: int) -> list[dict]:
    items = []
    for _ in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        right = a + b
        wrong = sorted({right + d for d in (-3, 2, 7, 11)} - {right})[:3]
        choices = [str(right), *map(str, wrong)]
        rng.shuffle(choices)
        items.append({"question": f"What is {a} plus {b}?", "choices": choices, "gold": choices.index(str(right))})
    return items


def _story_items(rng: random.Random, n: int) -> list[dict]:
    items = []
    for _ in range(n):
        name, place = rng.choice(NAMES), rng.choice(PLACES)
        k = rng.randrange(len(ACTIONS))
        first, then = ACTIONS[k]
        others = [ACTIONS[j][1] for j in rng.sample([j for j in range(len(ACTIONS)) if j != k], 3)]
        endings = [then, *others]
        rng.shuffle(endings)
        items.append({"ctx": f"{name} goes to {place} and {first}. Then {name}",
                      "endings": [f"{e}." for e in endings], "gold": endings.index(then)})
    return items


def _texts(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(3, 6)):
            name, place = rng.choice(NAMES), rng.choice(PLACES)
            first, then = rng.choice(ACTIONS)
            sentences.append(f"{name} goes to {place} and {first}, then {name} {then}.")
        rows.append({"text": " ".join(sentences)})
    return rows


def _gen_items(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        rows.append({"question": f"What is {a} plus {b}?", "answer": str(a + b)})
    return rows


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _yaml(folder: Path, task: str, body: str, splits: dict[str, Path]) -> None:
    files = "".join(f"    {split}: {path}\n" for split, path in splits.items())
    (folder / f"{task}.yaml").write_text(
        f"task: {task}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n{files}{body}", encoding="utf-8")


def write_tasks(folder: Path, *, n_test: int = 8, seed: int = 0) -> Path:
    """Write the four tasks into ``folder`` (their ``--include_path``); returns ``folder``."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    mc = {s: _jsonl(folder / f"mc_{s}.jsonl", _mc_items(rng, n)) for s, n in (("train", 12), ("test", n_test))}
    _yaml(folder, "synth_arith", "training_split: train\ntest_split: test\nfewshot_split: train\n"
          "output_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
          "doc_to_choice: \"{{choices}}\"\ndoc_to_target: gold\n"
          "metric_list:\n  - metric: acc\n  - metric: acc_norm\nmetadata:\n  version: 1.0\n", mc)
    story = {s: _jsonl(folder / f"story_{s}.jsonl", _story_items(rng, n)) for s, n in (("train", 12), ("test", n_test))}
    _yaml(folder, "synth_story", "training_split: train\ntest_split: test\nfewshot_split: train\nnum_fewshot: 3\n"
          "output_type: multiple_choice\ndoc_to_text: \"{{ctx}}\"\ndoc_to_choice: \"{{endings}}\"\n"
          "doc_to_target: gold\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\nmetadata:\n  version: 1.0\n",
          story)
    text = {"test": _jsonl(folder / "text_test.jsonl", _texts(rng, 4))}
    _yaml(folder, "synth_text", "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: \"\"\n"
          "doc_to_target: \"{{text}}\"\nmetric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n"
          "  - metric: bits_per_byte\nmetadata:\n  version: 1.0\n", text)
    gen = {s: _jsonl(folder / f"gen_{s}.jsonl", _gen_items(rng, n)) for s, n in (("train", 8), ("test", 4))}
    _yaml(folder, "synth_gen", "training_split: train\ntest_split: test\nfewshot_split: train\n"
          "output_type: generate_until\ndoc_to_text: \"Q: {{question}}\\nA:\"\ndoc_to_target: \"{{answer}}\"\n"
          "target_delimiter: \" \"\ngeneration_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 8\n  do_sample: false\n"
          "metric_list:\n  - metric: exact_match\n    regexes_to_ignore: [\" \"]\nmetadata:\n  version: 1.0\n", gen)
    return folder
