#!/usr/bin/env python3
"""Writes the text_classification example's data, with a known answer.

  python3 apps/examples/text/make_data.py OUT_DIR [--train N] [--test N] [--seed S]

OUT_DIR gets vocab.txt (one word per line; line 0 is "<pad>", so id 0 pads),
train.csv and test.csv (columns text,label). Each text holds 4 to 16 words:
neutral words and some of 20 positive and 20 negative ones, with a different
number of each; label 1 when there are more positive words than negative
ones, else 0. So the best accuracy is 1.0, and a model that adds up a score
per word (embedding - flatten - dense) can reach it. Some texts also hold
words that are not in the vocabulary, capitals and punctuation, which
tokenize drops or folds. Only the standard library; the same seed writes
the same files.
"""

import argparse
import csv
import os
import random
import sys

POSITIVE = ["good", "great", "fine", "superb", "lovely", "bright", "happy",
            "calm", "brave", "kind", "clever", "warm", "fresh", "smooth",
            "gentle", "neat", "bold", "proud", "wise", "glad"]
NEGATIVE = ["bad", "awful", "poor", "grim", "dull", "sad", "angry", "cold",
            "rude", "weak", "harsh", "stale", "rough", "noisy", "dirty",
            "lazy", "bitter", "broken", "gloomy", "ugly"]


def neutral_words(rng, n):
    letters = "bcdfghjklmnpqrstvwxz"
    vowels = "aeiou"
    words = set()
    while len(words) < n:
        w = "".join(rng.choice(letters) + rng.choice(vowels) for _ in range(3))
        if w not in POSITIVE and w not in NEGATIVE:
            words.add(w)
    return sorted(words)


def texts(rng, neutral, n):
    for _ in range(n):
        length = rng.randint(4, 16)
        pos = rng.randint(0, 3)
        neg = rng.randint(0, 3)
        while neg == pos:
            neg = rng.randint(0, 3)
        words = ([rng.choice(POSITIVE) for _ in range(pos)]
                 + [rng.choice(NEGATIVE) for _ in range(neg)])
        while len(words) < length:
            words.append(rng.choice(neutral))
        rng.shuffle(words)
        if rng.random() < 0.2:  # a word the vocabulary lacks
            words.insert(rng.randint(0, len(words)), "zzunknown")
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        text = " ".join(words) + rng.choice([".", "!", "", " ..."])
        yield text, 1 if pos > neg else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.train < 1 or args.test < 1:
        sys.exit("make_data.py: --train and --test must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    neutral = neutral_words(rng, 200)
    with open(os.path.join(args.out, "vocab.txt"), "w") as f:
        for w in ["<pad>"] + POSITIVE + NEGATIVE + neutral:
            f.write(w + "\n")
    for name, n in (("train", args.train), ("test", args.test)):
        with open(os.path.join(args.out, name + ".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            for text, label in texts(rng, neutral, n):
                w.writerow([text, label])
    print(f"wrote {args.out}/vocab.txt ({1 + len(POSITIVE) + len(NEGATIVE) + len(neutral)} words), "
          f"train.csv ({args.train} texts), test.csv ({args.test} texts)")


if __name__ == "__main__":
    main()
