"""tools/config_errors.py: which configuration a rejected start blames, in the engines' two wordings."""

from __future__ import annotations

from tools.config_errors import as_flag, blamed_parameter, validated_config, validation_messages
from tools.diagnose import classify


def test_a_python_parameter_the_message_blames():
    assert blamed_parameter("num_speculative_tokens must be provided with speculative model", config_context=True) \
        == "num_speculative_tokens"
    assert blamed_parameter("User-specified max_model_len (513) is greater than the derived max_model_len "
                            "(max_position_embeddings=512)", config_context=False) == "max_model_len"
    assert blamed_parameter("does not match the quantization method specified in the `quantization` argument (bnb).",
                            config_context=False) == "quantization"
    assert as_flag("max_model_len") == "--max-model-len"


def test_names_the_message_does_not_blame_are_no_parameter():
    # an engine's own invariant (SGLang's KV-pool leak check): key=value figures, nothing the user set
    assert blamed_parameter("token_to_kv_pool_allocator memory leak detected! available_size=3189424, "
                            "protected_size=0, self.max_total_num_tokens=3185200", config_context=False) is None
    # a model's own constraint outside any configuration check
    assert blamed_parameter("head_dim must be divisible by 64", config_context=False) is None


def test_pydantic_lists_its_messages_under_the_config_it_validated():
    bodies = ["pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
              "  Value error, num_speculative_tokens must be provided. [type=value_error, input_value=ArgsKwargs(())]",
              "    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
              "next record"]  # fmt: skip
    assert validation_messages(bodies) == [(1, "num_speculative_tokens must be provided.")]
    assert validated_config(bodies, 1) == "SpeculativeConfig"


def test_classify_a_pydantic_rejection_and_a_pydantic_failure_that_is_no_flag():
    rejected = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
                "  Value error, User-specified max_model_len (513) is greater than the derived max_model_len "
                "[type=value_error, input_value=ArgsKwargs((), {})]\n")  # fmt: skip
    d = classify(rejected)
    assert (d.category, d.flag) == ("invalid_flag", "--max-model-len")
    other = rejected.replace("User-specified max_model_len (513) is greater than the derived max_model_len",
                             "Model architectures ['X'] failed to be inspected.")
    d = classify(other)
    assert d.category == "unknown" and "failed to be inspected" in d.summary


def test_advice_to_change_a_parameter_blames_it_wherever_it_was_raised():
    assert blamed_parameter("Provided 32 number of heads. Try adjusting tensor_parallel_size value.",
                            config_context=False) == "tensor_parallel_size"  # fmt: skip
    assert blamed_parameter("Please reduce `max_num_seqs` or raise the memory", config_context=False) == "max_num_seqs"
    assert blamed_parameter("adjusting weights of layer_norm failed", config_context=False) is None
