"""Write ``tokenizer/``: the word-level tokenizer of this example (digits, ``+``, ``*``, ``=``), built locally.

Run from the repository root: ``python examples/trl_run/make_tokenizer.py`` (the folder is committed; this script
says how it was made, and rewrites it identically).
"""

from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = ["[PAD]", "[EOS]", "[UNK]", *(str(i) for i in range(10)), "+", "*", "="]

tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]",
                                    padding_side="left")
tokenizer.save_pretrained(Path(__file__).parent / "tokenizer")
