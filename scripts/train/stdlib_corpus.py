"""Training text that exists offline on any machine with Python: the standard library's .py sources.

Files are listed in a fixed order (sorted relative paths) and split into train / held-out by a hash
of the relative path, so the split does not depend on which other files a Python version ships.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|MASK|>")  # ids 0 and 1: end of file / DFlash's mask token


@dataclass(frozen=True)
class Corpus:
    root: Path
    train: list[str]
    held_out: list[str]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_held_out(rel: str, every: int) -> bool:
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % every == 0


def load(root: Path | None = None, *, max_files: int | None = None, held_out_every: int = 40) -> Corpus:
    """Read every .py below the stdlib folder (site-packages excluded); undecodable files are skipped."""
    root = root or stdlib_root()
    if not root.is_dir():
        raise SystemExit(f"stdlib folder not found: {root}")
    rels = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "site-packages" not in p.parts)
    if max_files is not None:
        rels = rels[:max_files]
    train, held = [], []
    for rel in rels:
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            (held if is_held_out(rel, held_out_every) else train).append(text)
    if not train or not held:
        raise SystemExit(f"too few stdlib sources under {root}: {len(train)} train, {len(held)} held out")
    return Corpus(root, train, held)


def train_tokenizer(texts: list[str], vocab_size: int, max_chars: int):
    """Byte-level BPE (no unknown tokens: every byte is in the alphabet), trained on a prefix of the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    sample, used = [], 0
    for t in texts:
        if used >= max_chars:
            break
        sample.append(t)
        used += len(t)
    tok.train_from_iterator(sample, trainer)
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"tokenizer put {s} at id {tok.token_to_id(s)}, expected {i}")
    return tok


def encode(tok, texts: list[str]) -> list[int]:
    """One stream: each file's ids followed by <|endoftext|>."""
    ids: list[int] = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(0)
    return ids


def save_tokenizer(tok, path: Path) -> None:
    """As a transformers fast tokenizer (what SGLang loads from the model folder)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token=SPECIALS[0],
                                   pad_token=SPECIALS[0], mask_token=SPECIALS[1])
    fast.save_pretrained(str(path))
