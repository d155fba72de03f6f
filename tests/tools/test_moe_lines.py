"""aiter's fused-MoE selection lines, one per format aiter has printed (ROCm/aiter, aiter/fused_moe.py).

Each line is rendered with aiter's own f-string, copied verbatim from the commit named beside it, over a key tuple
built as that commit builds ``keys``: ``str(x)`` fields print quoted, an enum passed as is prints as its repr."""

from __future__ import annotations

import pytest

from tools.diagnose import moe_fallbacks
from tools.moe_lines import MoELine, Unparsed, parse_line, parse_log, unparsed_lines, untuned_shapes


class _Enum:
    """A pybind11 / aiter enum: str() is ``ActivationType.Silu``, repr() is ``<ActivationType.Silu: 0>``."""

    def __init__(self, name: str, value: int):
        self.name, self.value = name, value

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"<{self.name}: {self.value}>"


SILU, SWIGLU = _Enum("ActivationType.Silu", 0), _Enum("ActivationType.Swiglu", 2)
BF16, FP8, FP4 = "torch.bfloat16", "torch.float8_e4m3fn", "torch.float4_e2m1fn_x2"
PER_TOKEN, PER_1X128, PER_1X32 = "QuantType.per_Token", "QuantType.per_1x128", "QuantType.per_1x32"
K1, K2 = "moe_ck2stages_gemm1_256x64x128x128_1x4_MulABScale_v3", "moe_ck2stages_gemm2_256x64x128x128_1x4_MulABScale_v3"


def _b0c4ed67e2(cfg, tag, keys):  # b0c4ed67e2 2025-04-13 "Moe 2stages (#228)"
    return f"[fused_moe] using {'default' if cfg is None else tag} for {keys} "


def _4b09253162(run_1stage, cfg, tag, keys):  # 4b09253162 2025-07-24 "refine moe (#701)"
    return f"[fused_moe] using {'1stage' if run_1stage else '2stage'} {'default' if cfg is None else tag} for {keys} "


def _f4179e8199(run_1stage, run_1stage_xbf16, cfg, tag, keys):  # f4179e8199 2026-04-24 (#2262) -> today
    return f"[fused_moe] using {'1stage' if run_1stage else '2stage'}{' xbf16' if run_1stage_xbf16 else ''} {'default' if cfg is None else tag} for {keys} "  # noqa: E501


def _tag(kernelName1, kernelName2):  # db69dad037 2025-06-12 (#531) -> today
    return f"({kernelName1=}, {kernelName2=})"


TOKEN11 = (32, 7168, 256, 256, 8, str(SILU), BF16, FP8, FP8, PER_TOKEN, True)  # b0c4ed67e2: 11 fields
TOKEN12 = TOKEN11 + (False,)  # 005ce4a74a 2025-04-23 (#287): + doweight_stage1
CU13 = (256,) + TOKEN12  # 15e91e49e9 2025-08-20 (#837): cu_num first
CU13_ENUM = (256, 32, 7168, 256, 256, 8, SILU, BF16, FP8, FP8, PER_TOKEN, True, False)  # 446260d19a 2026-05-09
GFX14 = ("gfx950",) + CU13_ENUM  # ad73ecb5fa 2026-06-13 (#3703): gfx first
GFX14_STR = ("gfx950",) + CU13  # 667d6c6695 2026-07-15 (#3656): str(activation) again

CASES = [
    # (line, format, untuned, stage, number of key fields)
    (_b0c4ed67e2(None, "", TOKEN11), "token_first", True, None, 11),
    (_b0c4ed67e2({}, "ck", TOKEN12), "token_first", False, None, 12),
    (_b0c4ed67e2({}, _tag(K1, K2), TOKEN12), "token_first", False, None, 12),  # db69dad037 tag
    (_4b09253162(False, None, "", TOKEN12), "token_first", True, "2stage", 12),
    (_4b09253162(True, None, "", CU13), "cu_num_first", True, "1stage", 13),
    (_4b09253162(False, {}, _tag(K1, K2), CU13), "cu_num_first", False, "2stage", 13),
    (_f4179e8199(True, True, {}, _tag("fmoe_bf16_blockscaleBf16_g1u1_32x256", ""), CU13), "cu_num_first", False,
     "1stage", 13),
    (_f4179e8199(False, False, None, "", CU13_ENUM), "cu_num_first", True, "2stage", 13),
    (_f4179e8199(False, False, None, "", CU13_ENUM + (True,)), "cu_num_first", True, "2stage", 14),  # 0fb93c3b8b bias
    (_f4179e8199(False, False, None, "", CU13_ENUM + (False, 0, 128)), "cu_num_first", True, "2stage", 16),  # ae77e7bbd5
    (_f4179e8199(False, False, None, "", GFX14), "gfx_first", True, "2stage", 14),
    (_f4179e8199(True, False, None, "", GFX14_STR), "gfx_first", True, "1stage", 14),
    (_f4179e8199(False, False, {}, _tag(K1, K2), GFX14), "gfx_first", False, "2stage", 14),
    # d78f4797ba 2026-08-22 (#4891): fhmoe_keys = (expert - 1, hidden_pad, intermediate_pad, str(gate_mode))
    (_f4179e8199(False, False, None, "", GFX14 + (255, 0, 64, "GateMode.SEPARATED")), "gfx_first", True, "2stage", 18),
]


@pytest.mark.parametrize("line,fmt,untuned,stage,n", CASES)
def test_every_historical_format(line, fmt, untuned, stage, n):
    r = parse_line("[aiter] " + line)
    assert isinstance(r, MoELine), r
    assert (r.format, r.untuned, r.stage, r.token) == (fmt, untuned, stage, 32)
    s = r.shape
    assert (s.model_dim, s.inter_dim, s.expert, s.topk) == (7168, 256, 256, 8)
    assert (s.act_type, s.dtype, s.q_dtype_a, s.q_dtype_w, s.q_type) == ("ActivationType.Silu", BF16, FP8, FP8,
                                                                         PER_TOKEN)  # fmt: skip
    assert s.use_g1u1 is True and s.doweight_stage1 is False
    assert r.cu_num == (None if fmt == "token_first" else 256)
    assert r.gfx == ("gfx950" if fmt == "gfx_first" else None)
    assert r.has_doweight_stage1 == (n != 11)


def test_kernel_names_xbf16_and_extras():
    r = parse_line(_f4179e8199(False, False, {}, _tag(K1, K2), GFX14))
    assert (r.kernel_name1, r.kernel_name2, r.act_enum_repr) == (K1, K2, True)
    r = parse_line(_b0c4ed67e2({}, "ck", TOKEN12))
    assert r.kernel == "ck" and r.kernel_name1 is None
    r = parse_line(_f4179e8199(True, True, {}, _tag("fmoe_x", ""), CU13))
    assert r.xbf16 and r.kernel_name1 == "fmoe_x" and r.kernel_name2 == "" and not r.act_enum_repr
    r = parse_line(_f4179e8199(False, False, None, "", GFX14 + (255, 0, 64, "GateMode.SEPARATED")))
    assert (r.extra, r.fhmoe_expert, r.hidden_pad, r.intermediate_pad, r.gate_mode) == ("fhmoe", 255, 0, 64,
                                                                                        "GateMode.SEPARATED")
    r = parse_line(_f4179e8199(False, False, None, "", CU13_ENUM + (False, 0, 128)))
    assert (r.extra, r.bias, r.hidden_pad, r.intermediate_pad) == ("bias_pad", False, 0, 128)
    r = parse_line(_f4179e8199(False, False, None, "", CU13_ENUM + (True,)))
    assert (r.extra, r.bias) == ("bias", True)


def test_activation_spellings_normalise_to_the_tuner_csv_name():
    swiglu = (256, 32, 2880, 2880, 128, 4, SWIGLU, BF16, BF16, FP4, PER_1X32, True, False)
    assert parse_line(_f4179e8199(False, False, None, "", swiglu)).shape.act_type == "ActivationType.Swiglu"
    no = ("gfx950", 256, 32, 2880, 2880, 128, 4, _Enum("ActivationType.No", -1), BF16, BF16, FP4, PER_1X32, True, False)
    assert parse_line(_f4179e8199(False, False, None, "", no)).shape.act_type == "ActivationType.No"
    plain = (256, 32, 7168, 256, 256, 8, "silu", BF16, FP8, FP8, PER_TOKEN, True, False)
    assert parse_line(_f4179e8199(False, False, None, "", plain)).shape.act_type == "ActivationType.Silu"


def test_untuned_notices():
    # cd994551ce 2026-05-08 (#2972) -> today
    kn1 = kn2 = "flydsl_moe_x"
    notice = (f"[fused_moe] no tuned FlyDSL config for {GFX14}, "
              f"using heuristic FlyDSL fallback ({kn1=}, {kn2=})")  # fmt: skip
    r = parse_line("[aiter] " + notice)
    assert r.kind == "no_tuned_flydsl" and r.untuned and r.format == "gfx_first"
    # b0c4ed67e2 2025-04-13 -> today (AITER_ONLINE_TUNE=1)
    r = parse_line(f"Fmoe tuning not support for {CU13}")
    assert r.kind == "tuning_not_supported" and r.untuned
    # aadf0a89de 2026-03-01 .. eaef170f42 2026-07-08: a tuned fallback row ran
    r = parse_line(f"[fused_moe] flydsl unavailable, using fallback config for {CU13_ENUM}")
    assert r.kind == "flydsl_fallback_config" and not r.untuned
    r = parse_line(f"[fused_moe] flydsl unavailable and no fallback for {CU13_ENUM}, using default heuristics")
    assert r.kind == "flydsl_no_fallback" and r.untuned
    # 303a583c89 2026-04-14
    r = parse_line(f"[fused_moe] tuned config found for {GFX14} but is_shuffled=False. Tuned kernels are ...")
    assert r.kind == "tuned_not_shuffled" and not r.untuned


# real lines from public logs (found with the find_string index; wrapped lines joined)
PUBLIC = [
    ("[aiter] [fused_moe] using 2stage default for (80, 4096, 4096, 384, 289, 9, 'ActivationType.Silu', "
     "'torch.bfloat16', 'torch.float8_e4m3fnuz', 'torch.float8_e4m3fnuz', 'QuantType.per_1x128', True, False)",
     "cu_num_first", 80, 4096, (4096, 384, 289, 9), "torch.float8_e4m3fnuz", "QuantType.per_1x128"),
    ("[fused_moe] using 2stage default for ('gfx950', 256, 64, 8192, 2048, 64, 9, 'ActivationType.Silu', "
     "'torch.bfloat16', 'torch.float4_e2m1fn_x2', 'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False)",
     "gfx_first", 256, 64, (8192, 2048, 64, 9), "torch.float4_e2m1fn_x2", "QuantType.per_1x32"),
]


@pytest.mark.parametrize("line,fmt,cu,token,dims,qw,qt", PUBLIC)
def test_public_log_lines(line, fmt, cu, token, dims, qw, qt):
    r = parse_line(line)
    assert isinstance(r, MoELine) and r.untuned
    assert (r.format, r.cu_num, r.token) == (fmt, cu, token)
    assert (r.shape.model_dim, r.shape.inter_dim, r.shape.expert, r.shape.topk) == dims
    assert (r.shape.q_dtype_w, r.shape.q_type, r.shape.act_type) == (qw, qt, "ActivationType.Silu")


@pytest.mark.parametrize("line", [
    "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 384, 16, 4, ...)",  # elided in a public note
    "[aiter] [fused_moe] using 1stage default for (304, 1, 4096, 1536, 256, 6)",  # too short
    "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bf",  # cut
    "[aiter] [fused_moe] using 2stage default for (32, 7168, 256, 256, 'ActivationType.Silu', 'torch.bfloat16', "
    "'torch.bfloat16', 'torch.bfloat16', 'QuantType.No', True, False)",  # 4 ints: no known layout
    "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 256, 256, 8, 'relu2', 'torch.bfloat16', "
    "'torch.bfloat16', 'torch.bfloat16', 'QuantType.No', True, False)",  # not an aiter activation
    "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 256, 256, 8, 'ActivationType.Silu', "
    "'torch.bfloat16', 'torch.bfloat16', 'torch.bfloat16', 'QuantType.No', True, False, 'x', 1.5)",  # unknown tail
    "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 256, 256, 8, 'ActivationType.Silu', "
    "'torch.bfloat16', 'torch.bfloat16', 'torch.bfloat16', 'QuantType.No', 'True', False)",  # use_g1u1 not a bool
    "[aiter] [fused_moe] using 2stage default for shape 7168x256",
])
def test_malformed_lines_are_unparsed_not_guessed(line):
    r = parse_line(line)
    assert isinstance(r, Unparsed) and r.line == line and r.reason
    assert moe_fallbacks(line) == []
    assert unparsed_lines(line) == [r]


def test_unrelated_lines_are_ignored():
    assert parse_line("[aiter] import [module_moe_ck2stages_f8_f8_preshuffle_on_b16_silu_per_1x128] under x") is None
    assert parse_line("[aiter] [fused_moe] duplicate tuned rows (primary) in /x.csv; keeping first") is None


def test_moe_fallbacks_dedupes_untuned_across_formats_and_reports_the_rest():
    log = "\n".join([
        "[2026-11-30 10:00:00 TP0] [aiter] " + _f4179e8199(False, False, None, "", GFX14),
        "[2026-11-30 10:00:00 TP1] [aiter] " + _f4179e8199(True, False, None, "", GFX14_STR),
        "[aiter] " + _4b09253162(False, None, "", CU13),
        "[aiter] " + _f4179e8199(False, False, {}, _tag(K1, K2), GFX14[:4] + (4096,) + GFX14[5:]),  # tuned: not a fallback
        "[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 384, 16, 4, ...)",
        "INFO something else",
    ])  # fmt: skip
    shapes = moe_fallbacks(log)
    assert len(shapes) == 1 and shapes[0].model_dim == 7168 and shapes[0].act_type == "ActivationType.Silu"
    assert untuned_shapes(log) == shapes
    assert len(parse_log(log)) == 5
    assert [u.line for u in unparsed_lines(log)] == ["[aiter] [fused_moe] using 2stage default for (256, 32, 7168, 384, 16, 4, ...)"]


def test_a_key_tuple_cut_at_the_terminal_width_is_read_whole():
    """A shape line pasted from a terminal arrives in pieces of the screen's width, behind the engine's prefix."""
    from tools.diagnose import moe_fallbacks

    line = "[2026-02-17 23:52:11 TP4] " + PUBLIC[0][0]
    pieces = [line[i:i + 64] for i in range(0, len(line), 64)]
    assert len(pieces) >= 3
    shapes = moe_fallbacks("\n".join(["[2026-02-17 23:52:11 TP4] Decode batch, #running-req: 3", *pieces]))
    assert [(s.model_dim, s.inter_dim, s.expert, s.topk) for s in shapes] == [(4096, 384, 289, 9)]
