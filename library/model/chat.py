"""The chat template around a prompt: the one place prompts and training examples are formatted.

Chat formatting goes through the tokenizer's ChatML template with our own short system
message (:data:`SYSTEM_PROMPT`) instead of SmolLM's default one, which costs ~30 tokens per
prompt for nothing. Prompts are therefore::

    <|im_start|>system
    You answer software troubleshooting questions. Follow the answer format exactly.<|im_end|>
    <|im_start|>user
    {question text}<|im_end|>
    <|im_start|>assistant

and a training example appends ``{completion}<|im_end|>`` (the eos token) to that prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


#: Our system message. Short on purpose: SmolLM2's default system prompt ("You are a helpful AI
#: assistant named SmolLM, trained by Hugging Face") costs tokens on every prompt of every
#: rollout and says nothing about the task. Changing it changes every prompt, so the SFT model
#: must be trained and evaluated with the same one (everything goes through format_prompt).
SYSTEM_PROMPT = "You answer software troubleshooting questions. Follow the answer format exactly."


# ------------------------------------------------------------------------------ formatting
def _messages(user_text: str, system: str | None) -> list[dict[str, str]]:
    messages = [] if system is None else [{"role": "system", "content": system}]
    return messages + [{"role": "user", "content": user_text}]


def format_prompt(tokenizer, user_text: str, *, system: str | None = SYSTEM_PROMPT) -> str:
    """The chat-formatted prompt text, ending with the assistant header (generation prompt).

    >>> from library.model.load import load_tokenizer
    >>> print(format_prompt(load_tokenizer("tiny"), "Q?"))
    <|im_start|>system
    You answer software troubleshooting questions. Follow the answer format exactly.<|im_end|>
    <|im_start|>user
    Q?<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    return tokenizer.apply_chat_template(_messages(user_text, system), tokenize=False, add_generation_prompt=True)


@dataclass(frozen=True)
class FormattedExample:
    """A training example split at the assistant turn: ``prompt + completion`` is the full text.

    ``completion`` ends with the eos token (``<|im_end|>``) so the model learns to stop.
    ``as_dict()`` is TRL's prompt-completion dataset row.
    """

    prompt: str
    completion: str

    @property
    def text(self) -> str:
        return self.prompt + self.completion

    def as_dict(self) -> dict[str, str]:
        return {"prompt": self.prompt, "completion": self.completion}


def format_example(tokenizer, user_text: str, completion: str, *, system: str | None = SYSTEM_PROMPT) -> FormattedExample:
    """Prompt/completion split of one training example (the prompt is masked out of the loss).

    >>> from library.model.load import load_tokenizer
    >>> ex = format_example(load_tokenizer("tiny"), "Q?", "TRACE: x.\\nANSWER: A")
    >>> ex.completion
    'TRACE: x.\\nANSWER: A<|im_end|>'
    >>> ex.prompt.endswith("<|im_start|>assistant\\n")
    True
    """
    prompt = format_prompt(tokenizer, user_text, system=system)
    return FormattedExample(prompt=prompt, completion=completion.strip() + tokenizer.eos_token)


def encode_example(tokenizer, user_text: str, completion: str, *, max_length: int | None = None,
                   system: str | None = SYSTEM_PROMPT) -> dict[str, Any]:
    """Token ids for a training example with the prompt masked: ``labels`` is -100 on the prompt.

    Prompt and completion are tokenized separately and concatenated, so the boundary is exact
    (the prompt ends with a newline, which the SmolLM2 BPE never merges into the next word).
    ``max_length`` truncates the completion's tail (never the prompt).

    >>> from library.model.load import load_tokenizer
    >>> enc = encode_example(load_tokenizer("tiny"), "Q?", "ANSWER: A")
    >>> enc["labels"][: enc["prompt_len"]] == [-100] * enc["prompt_len"]
    True
    >>> enc["input_ids"][-1] == load_tokenizer("tiny").eos_token_id
    True
    """
    ex = format_example(tokenizer, user_text, completion, system=system)
    prompt_ids = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(ex.completion, add_special_tokens=False)["input_ids"]
    if max_length is not None:
        completion_ids = completion_ids[: max(0, max_length - len(prompt_ids))]
    input_ids = prompt_ids + completion_ids
    labels = [-100] * len(prompt_ids) + completion_ids
    return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids), "labels": labels,
            "prompt_len": len(prompt_ids)}
