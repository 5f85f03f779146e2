#!/usr/bin/env python3
"""Regenerates tiny_golden.json: small tokenizer.json variants and what Hugging Face `tokenizers`
makes of them. Run by hand (`pip install tokenizers`); tests only read the output.

Each config is a tiny byte-level BPE (BLOOM's pre-tokenizer, 256 byte tokens and a handful of
merges chosen to exercise rank order, leftmost ties and stale heap entries) plus one feature that
the big fixture tokenizer does not use: legacy merges, plain ByteLevel, unk handling, ignore_merges,
added tokens with lstrip/rstrip/normalized.
"""
import copy
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer

BLOOM_SPLIT_REGEX = " ?[^(\\s|[.,!?…。，、।۔،])]+"
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
MERGES = [("a", "b"), ("b", "c"), ("a", "a"), ("ab", "c"), ("a", "bc"), ("Ġ", "a"), ("aa", "aa"), ("Ġa", "b"),
          ("h", "i"), ("Ġ", "Ġ"), ("ĠĠ", "Ġ"), ("ä", "¸"), ("ä¸", "Ń"), ("Ġ", "hi"), ("c", "a"), ("b", "ca")]


def added(content, id_, special=False, lstrip=False, rstrip=False, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def base():
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[B2U[b]] = len(vocab)
    for a, b in MERGES:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added(t, i, special=True) for i, t in enumerate(SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": BLOOM_SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in MERGES]},
    }


def configs():
    out = {"base": base()}
    d = base()
    d["model"]["merges"] = [f"{a} {b}" for a, b in MERGES]
    out["legacy_merges"] = d
    d = base()
    d["pre_tokenizer"] = d["pre_tokenizer"]["pretokenizers"][1]
    out["plain_byte_level"] = d
    d = base()
    d["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {}}
    d["model"]["ignore_merges"] = True
    d["model"]["vocab"]["ĠaĠa"] = len(d["model"]["vocab"])  # reachable only through ignore_merges
    d["model"]["vocab"]["cab"] = len(d["model"]["vocab"])
    out["ignore_merges"] = d
    for name, unk, fuse in [("unk", "<unk>", False), ("unk_fused", "<unk>", True), ("no_unk", None, False)]:
        d = base()
        for b in (0x01, 0x02, ord("z")):  # bytes with no vocabulary entry
            del d["model"]["vocab"][B2U[b]]
        d["model"]["unk_token"] = unk
        d["model"]["fuse_unk"] = fuse
        out[name] = d
    d = base()
    vocab = d["model"]["vocab"]
    next_id = [len(vocab)]

    def id_for(content):  # what Hugging Face assigns: the model id, else the next free id
        if content in vocab:
            return vocab[content]
        next_id[0] += 1
        return next_id[0] - 1

    d["added_tokens"] += [
        added("hi", id_for("hi")),  # already in the model vocabulary: keeps its id
        added("<L>", id_for("<L>"), lstrip=True),
        added("<R>", id_for("<R>"), rstrip=True),
        added("<LR>", id_for("<LR>"), lstrip=True, rstrip=True, special=True),
        added(" x y", id_for(" x y")),
        added("abcd", id_for("abcd"), normalized=True),
        added("abc", id_for("abc")),  # a model token too
        added("cd", id_for("cd")),
        added("é!", id_for("é!"), normalized=True),  # decodes through ByteLevel: é is byte 0xE9
        added("<|a b|>", id_for("<|a b|>"), special=True),  # has a space: decodes as itself
    ]
    out["added_tokens"] = d
    return out


def random_texts(rng, pool, n):
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def main():
    rng = random.Random(20240611)
    fixed = ["", " ", "a", "aa", "aaa", "aaaa", "aaaaa", "aaaaaaa", "ab", "abc", "abcabc", "bca", "cab", "a b  c",
             " a", " ab", "  a", "a  a", " a a", "hi", " hi", "hi<s>hi", "<s>", "</s><pad><unk>", "<s", "中", "中中",
             "zz", "\x01\x02z", "a\x01b", "\x01\x01", "xz\x02y", "(a|b)", "a.b,c!", "a\u3000b", "a\u00a0b",
             "<L>", " <L> ", "x  <L>y", "<R>  x", "<R> x y", "a <LR>  b", "<LR><LR>", " x y x y", "abcd", "abcde",
             "xabcdx", "cdabc", "é!", "é", "<|a b|>", "<s>abcd</s>", "\t<L>\n", "\u3000<R>\u3000"]
    pool = list("abchiz xy") + [" ", "  ", "\t", "\n", "\u3000", "\u00a0", ".", ",", "(", "|", "中", "é", "😀",
                                "\x01", "\x02", "<s>", "</s>", "<L>", "<R>", "<LR>", " x y", "abcd", "cd", "é!",
                                "<|a b|>", "hi"]
    texts = fixed + random_texts(rng, pool, 150)
    out = {"tokenizers_version": tokenizers.__version__, "configs": []}
    for name, d in configs().items():
        tok = Tokenizer.from_str(json.dumps(d))
        vocab_size = tok.get_vocab_size(with_added_tokens=True)
        cases = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
        decode_cases = []
        for _ in range(40):
            ids = [rng.randrange(vocab_size + 3) for _ in range(rng.randint(0, 10))]
            decode_cases.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                                 "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
        out["configs"].append({"name": name, "vocab_size": vocab_size, "tokenizer": d, "cases": cases,
                               "decode_cases": decode_cases})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_golden.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(out['configs'])} configs x {len(texts)} texts")


if __name__ == "__main__":
    main()
