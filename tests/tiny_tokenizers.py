"""Real tokenizers for the tiny models, built locally with the ``tokenizers`` library (nothing is downloaded).

The Llama one is a SentencePiece-style BPE (``▁`` word boundaries) trained on a fixed word list; the BERT and T5
ones are WordLevel over that list. Each is wrapped as ``PreTrainedTokenizerFast`` with the special
tokens of its model family at the ids the tiny configs use (tests/tiny_models.py) and filler words up to the
models' vocabulary size (96), so that pipelines encode, pad and decode text (any generated id included)
exactly as they would with a Hub tokenizer.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "VOCAB_SIZE",
    "WORDS",
    "bert_tokenizer",
    "byte_level_tokenizer",
    "llama_tokenizer",
    "save_as_hub_tokenizer",
    "t5_tokenizer",
    "whisper_tokenizer",
]

#: The vocabulary size of the tiny text models.
VOCAB_SIZE = 96

#: Ordinary words; every tokenizer maps them to the ids after its special tokens.
WORDS = (
    "the cat sat on a mat and dog ran to park with big red ball it was sunny day birds sang in trees "
    "children played near lake while old man read book under tall oak tree wind blew softly over green "
    "hills river flowed past small village where people lived happy lives each morning baker opened shop "
    "fresh bread smell filled street"
).split()


def _word_level(specials: list[str], unk: str, template: tuple[str, str | None] | None, **tokens: Any) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(specials)}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    while len(vocab) < VOCAB_SIZE:
        vocab[f"w{len(vocab)}"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if template is not None:
        single, pair = template
        used = sorted({t for t in (single + " " + (pair or "")).split() if t in vocab}, key=vocab.get)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(t, vocab[t]) for t in used]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=unk, **tokens)


def llama_tokenizer() -> Any:
    """``<pad>``=0, ``<s>``=1 (prepended), ``</s>``=2, ``<unk>``=3, then the characters and BPE merges of
    :data:`WORDS` (a SentencePiece-style BPE as Llama's: text decodes back with its spaces, so stop strings work)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator([" ".join(WORDS)] * 3, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )


def byte_level_tokenizer() -> Any:
    """A byte-level BPE (``Ġ`` marks a space: GPT-2's, Llama 3's and Qwen's kind) trained on :data:`WORDS`:
    ``<|pad|>``=0, ``<|begin_of_text|>``=1 (prepended), ``<|end_of_text|>``=2, then the bytes of the words and their
    merges up to :data:`VOCAB_SIZE`. Its alphabet is the words' ASCII bytes only, so that every token a random model
    generates decodes to text on its own (the ExecuTorch LLM runner hands each token to Python as a ``str``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|begin_of_text|>", "<|end_of_text|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator([" ".join(WORDS)] * 3, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        padding_side="left",
    )


def save_as_hub_tokenizer(tokenizer: Any, folder: Any) -> None:
    """Save ``tokenizer`` as a Hub repo made by transformers 4 has it: ``tokenizer_config.json`` names the class
    ``PreTrainedTokenizerFast``, which every transformers reads (transformers 5 writes ``TokenizersBackend``, which
    the runtimes' tools that pin transformers 4, optimum among them, do not know)."""
    import json
    from pathlib import Path

    tokenizer.save_pretrained(folder)
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("backend", None)
    path.write_text(json.dumps(config, indent=2))


def t5_tokenizer() -> Any:
    """``<pad>``=0 (the decoder start), ``</s>``=1 (appended), ``<unk>``=2, then :data:`WORDS`."""
    return _word_level(["<pad>", "</s>", "<unk>"], "<unk>", ("$A </s>", None), eos_token="</s>", pad_token="<pad>")


def bert_tokenizer() -> Any:
    """``[PAD]``=0, ``[UNK]``=1, ``[CLS]``=2, ``[SEP]``=3, ``[MASK]``=4, then :data:`WORDS`; pairs get
    ``token_type_ids`` 1 on the second sentence."""
    return _word_level(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        "[UNK]",
        ("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1"),
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def whisper_tokenizer() -> Any:
    """A byte-level BPE ``WhisperTokenizer`` (``Ġ`` marks a space) over the letters and first words of :data:`WORDS`,
    with Whisper's special tokens last, as in Whisper's vocabulary: ``<|endoftext|>``=93 (EOS and padding),
    ``<|startoftranscript|>``=94 (the decoder start), ``<|notimestamps|>``=95."""
    from transformers import WhisperTokenizer

    vocab: dict[str, int] = {}
    for char in ["Ġ", *sorted(set("".join(WORDS)))]:
        vocab.setdefault(char, len(vocab))
    merges = []
    for word in WORDS:
        if len(vocab) + len(word) > VOCAB_SIZE - 3:
            break
        piece = "Ġ"
        for char in word:
            if piece + char not in vocab:
                merges.append((piece, char))
                vocab[piece + char] = len(vocab)
            piece += char
    while len(vocab) < VOCAB_SIZE - 3:
        vocab[f"<|filler{len(vocab)}|>"] = len(vocab)
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"]
    for token in specials:
        vocab[token] = len(vocab)
    return WhisperTokenizer(vocab=vocab, merges=merges, additional_special_tokens=specials[1:])
