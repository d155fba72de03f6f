# dayzero twin: a hand-written excerpt of SGLang 0.5.12's DeepSeek NextN (MTP) draft model, used only when the
# real release could not be downloaded. It keeps what decides weight loading: the class, its checkpoint-name
# mapper, and where the MTP layer is registered. The torch modules are elided. Not SGLang's code.
# SPDX-License-Identifier: Apache-2.0
from sglang.srt.models.deepseek_v2 import DeepseekV2DecoderLayer, DeepseekV3ForCausalLM
from sglang.srt.models.utils import WeightsMapper
from sglang.srt.utils import add_prefix


class DeepseekModelNextN:
    """embed_tokens, enorm, hnorm, eh_proj and shared_head under ``model``; the MTP layer as ``model.decoder``."""

    def __init__(self, config, quant_config=None, prefix: str = ""):
        layer_name = "decoder"
        self.decoder = DeepseekV2DecoderLayer(config, 0, quant_config=quant_config, is_nextn=True,
                                              prefix=add_prefix(layer_name, prefix))


class DeepseekV3ForCausalLMNextN(DeepseekV3ForCausalLM):
    # The loader maps the checkpoint's exclude list through this before the draft model is built.
    hf_to_sglang_mapper = WeightsMapper(
        orig_to_new_substr={
            "model.layers.61": "model.decoder",
        },
    )

    def __init__(self, config, quant_config=None, prefix: str = ""):
        nextn_quant_config = quant_config
        if nextn_quant_config is not None and nextn_quant_config.get_name() == "quark":
            from sglang.srt.layers.quantization.quark.utils import should_ignore_layer

            ckpt_prefix = f"model.layers.{config.num_hidden_layers}"
            mapped_prefix = self.hf_to_sglang_mapper._map_name(ckpt_prefix)
            if should_ignore_layer(mapped_prefix, nextn_quant_config.exclude_layers):
                nextn_quant_config = None
        self.model = DeepseekModelNextN(config, nextn_quant_config, prefix=add_prefix("model", prefix))

    def load_weights(self, weights):
        super().load_weights(weights, is_nextn=True)


EntryClass = [DeepseekV3ForCausalLMNextN]
