"""One sentence on each op generated from libtorch's schema, for its documentation in every
language: the first sentence of PyTorch's own docstring of the op (torch, torch.Tensor,
torch.nn.functional, torch.linalg, torch.fft, torch.special; the installed wheel's, as the schema
is), with its reStructuredText made plain; for the ops PyTorch does not document, a pattern of
their name (`upsample_bilinear2d`, `sym_size`, `native_layer_norm` ...) or a sentence of `OWN`.
Every generated op gets one: `make gen` fails on an op with none.
"""
from __future__ import annotations

import re

import schema

# The ops PyTorch gives no docstring, which no pattern below names: by op name (all overloads).
OWN = {
    "data": "The tensor's data without its autograd history (`Tensor.data`).",
    "output_nr": "Which output of the op that made it this tensor is, in autograd's graph.",
    "align_tensors": "Aligns named tensors to one order of their dimension names.",
    "feature_dropout": "Zeroes whole channels at random with probability `p` while training (channel dropout).",
    "affine_grid_generator": "The sampling grid of the affine transformations `theta` for an output of `size` "
                             "(`torch.nn.functional.affine_grid`).",
    "clamp_max": "Clamps every element to at most `max` (`torch.clamp` with `max` only).",
    "clamp_min": "Clamps every element to at least `min` (`torch.clamp` with `min` only).",
    "constant_pad_nd": "Pads the last dimensions with `value`, two widths per dimension from the last "
                       "(`torch.nn.functional.pad`, mode `constant`).",
    "convolution": "A convolution or transposed convolution of any dimension, with stride, padding, dilation "
                   "and groups: the op every `conv*` calls.",
    "convolution_overrideable": "`convolution` for an out-of-tree backend that overrides it.",
    "copy": "A copy of `input` with `src`'s values written into it, broadcast (`copy_` without the write).",
    "embedding_renorm": "Renormalizes the rows of the embedding table that `indices` select to at most `max_norm` "
                        "in the `norm_type` norm.",
    "fill": "A tensor of `input`'s shape filled with `value` (`fill_` without the write).",
    "grid_sampler": "Samples `input` at the locations of `grid` by interpolation "
                    "(`torch.nn.functional.grid_sample`).",
    "grid_sampler_2d": "Samples a batch of images at the locations of `grid` by interpolation "
                       "(`torch.nn.functional.grid_sample`).",
    "grid_sampler_3d": "Samples a batch of volumes at the locations of `grid` by interpolation "
                       "(`torch.nn.functional.grid_sample`).",
    "pad": "Pads the tensor, two widths per dimension from the last, in `mode` (`torch.nn.functional.pad`).",
    "special_entr": "The entropy term `-x * ln(x)`, elementwise.",
    "special_ndtr": "The standard normal distribution's cumulative distribution function, elementwise.",
    "special_ndtri": "The inverse of the standard normal distribution's cumulative distribution function, "
                     "elementwise.",
    "special_log_ndtr": "The log of the standard normal distribution's cumulative distribution function, "
                        "elementwise.",
    "special_i0e": "The modified Bessel function of the first kind of order 0, exponentially scaled, elementwise.",
    "special_i1": "The modified Bessel function of the first kind of order 1, elementwise.",
    "special_i1e": "The modified Bessel function of the first kind of order 1, exponentially scaled, elementwise.",
    "is_distributed": "Whether the tensor is distributed (false in libtorch).",
    "is_same_size": "Whether two tensors have the same shape.",
    "numpy_T": "The tensor with its dimensions in reverse order (`Tensor.T`).",
    "matrix_H": "The conjugate transpose of a matrix (`Tensor.H`).",
    "scalar_tensor": "A tensor of no dimensions holding `s`.",
    "slice": "The view of every `step`-th element from `start` to before `end` along `dim` "
             "(`input[start:end:step]`).",
    "slice_inverse": "A view of `src` with `input`'s shape, of which `input` is the slice `start:end:step` "
                     "along `dim`.",
    "split_with_sizes": "Splits the tensor into views of the given sizes along `dim` (`torch.split` with a list).",
    "unsafe_split_with_sizes": "`split_with_sizes` whose views autograd does not track as views of `input`.",
    "unique_dim": "The unique slices along `dim`, sorted, with inverse indices and counts (`torch.unique` "
                  "with `dim`).",
    "unique_dim_consecutive": "Collapses consecutive equal slices along `dim` (`torch.unique_consecutive` "
                              "with `dim`).",
    "norm_except_dim": "The norm over every dimension but `dim`, as weight normalization takes it.",
    "binomial": "Draws from binomial distributions of `count` trials with probabilities `prob`.",
    "frobenius_norm": "The Frobenius norm over `dim`.",
    "nuclear_norm": "The nuclear norm (the sum of the singular values) of a matrix or a batch of matrices.",
    "rsub": "`other - alpha * input`: subtraction with its operands swapped.",
    "choose_qparams_optimized": "The scale and zero point that quantize `input` with the least error.",
    "lift": "The tensor as an input of a function being traced (`input` itself when nothing traces).",
    "lift_fresh": "The tensor as an input of a function being traced (`input` itself when nothing traces).",
    "lift_fresh_copy": "A copy of the tensor as an input of a function being traced.",
    "nonzero_numpy": "The indices of the nonzero elements, one tensor per dimension "
                     "(`torch.nonzero(as_tuple=True)`).",
    "cross_entropy_loss": "The cross entropy of logits against targets (`torch.nn.functional.cross_entropy`).",
    "normal_functional": "A tensor of `input`'s shape drawn from a normal distribution (`normal_` without "
                         "the write).",
    "nll_loss_nd": "The negative log likelihood of log-probabilities against class targets, of any dimension "
                   "(`torch.nn.functional.nll_loss`).",
    "nll_loss2d": "The negative log likelihood of 2-D log-probability maps against class targets "
                  "(`torch.nn.functional.nll_loss`).",
    "glu_jvp": "The forward-mode derivative of `glu`.",
    "log_sigmoid": "`log(1 / (1 + exp(-x)))`, elementwise (`torch.nn.functional.logsigmoid`).",
    "col2im": "Sums sliding local blocks back into a batch of images (`torch.nn.functional.fold`).",
    "im2col": "Extracts sliding local blocks from a batch of images (`torch.nn.functional.unfold`).",
    "pad_sequence": "Stacks sequences of different lengths into one tensor, padded with `padding_value` "
                    "(`torch.nn.utils.rnn.pad_sequence`).",
    "flatten_dense_tensors": "The elements of a list of tensors, concatenated into one 1-D tensor.",
    "unflatten_dense_tensors": "Tensors of `tensors`' shapes cut from the 1-D `flat` (the inverse of "
                               "`flatten_dense_tensors`).",
    "batch_norm_stats": "The mean and inverse standard deviation of a batch, per channel (synchronized batch "
                        "norm's first step).",
    "batch_norm_elemt": "Normalizes a batch with the given mean and inverse standard deviation, per channel.",
    "batch_norm_gather_stats": "Combines the per-process means and inverse standard deviations of a batch, and "
                               "updates the running statistics.",
    "batch_norm_gather_stats_with_counts": "`batch_norm_gather_stats` with each process's count of elements.",
    "batch_norm_update_stats": "The batch's mean and variance per channel, folded into the running statistics.",
}

UPSAMPLE = re.compile(r"upsample_(nearest|linear|bilinear|bicubic|trilinear)([123])d$")
PAD = re.compile(r"(reflection|replication)_pad([123])d$")
RNN = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
SLOW_CONV = re.compile(r"(slow_conv_transpose|slow_conv_dilated|slow_conv|thnn_conv|conv_depthwise)([23])d$")


def pattern(o: schema.Overload) -> str | None:
    """A sentence from the shape of the op's name, for families PyTorch does not document."""
    name = o.name
    if m := UPSAMPLE.match(name):
        mode, n = m.groups()
        return (f"Resizes the last {n} dimension{'s' * (n != '1')} by {mode} interpolation "
                f"(`torch.nn.functional.interpolate`, mode `{mode}`).")
    if m := PAD.match(name):
        how = {"reflection": "the reflection of the input at its border", "replication": "copies of its edge"}
        mode = {"reflection": "reflect", "replication": "replicate"}[m.group(1)]
        return (f"Pads the last {m.group(2)} dimension(s) with {how[m.group(1)]} "
                f"(`torch.nn.functional.pad`, mode `{mode}`).")
    if name in RNN:
        net = RNN[name] + (f" ({name[4:]})" if name.startswith("rnn_") else "")
        given = "a packed sequence (its data and batch sizes)" if o.overload == "data" else "a padded sequence"
        return f"Runs a multi-layer {net} over {given} (`torch.nn.{RNN[name]}`)."
    if name.endswith("_cell") and name[:-5] in RNN:
        net = RNN[name[:-5]]
        return f"One time step of a{'n' * (net[0] in 'LR')} {net} cell (`torch.nn.{net}Cell`)."
    if m := SLOW_CONV.match(name.removesuffix("_forward")):
        kind = {"slow_conv_transpose": "transposed ", "slow_conv_dilated": "dilated ", "conv_depthwise": "depthwise "}
        return (f"A {kind.get(m.group(1), '')}{m.group(2)}-D convolution by libtorch's reference kernel, "
                f"the one `convolution` falls back to.")
    if name.startswith("sym_constrain_range"):
        return "Checks that an integer lies in [`min`, `max`]; a traced program keeps it as a constraint."
    if name == "sym_is_contiguous":
        return "Whether the tensor is contiguous in memory (`is_contiguous`, as symbolic shapes ask it)."
    if name.startswith("sym_"):
        return f"The tensor's `{name[4:]}` (as symbolic shapes ask it: here a plain integer)."
    if name.startswith("native_"):
        return (f"`{name[7:]}` as its kernel computes it: the result, and what autograd keeps of it "
                f"(the mask, or the mean and inverse standard deviation).")
    if name.endswith("_forward"):
        return f"`{name.removesuffix('_forward')}` with the intermediate values its backward formula uses."
    return None


ROLE = re.compile(r":(?:attr|func|meth|class|math|ref|mod|data|obj):`~?([^`]*)`")
LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")


def plain(text: str) -> str:
    """reStructuredText made plain: roles and literals as code spans, links as their text, an
    escaped space a space (its backslash could end a line of a C++ comment, and continue it)."""
    text = LINK.sub(r"\1", text).replace("\\ ", " ")
    text = ROLE.sub(r"`\1`", text)
    return re.sub(r"``([^`]*)``", r"`\1`", text)


def first_sentence(doc: str) -> str | None:
    """The first sentence of a docstring, after its signature line(s)."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
    if paragraphs and re.match(r"^[\w.]+\(.*\)", paragraphs[0], re.S) and len(paragraphs) > 1:
        paragraphs = paragraphs[1:]
    if not paragraphs or paragraphs[0].startswith(".."):
        return None
    text = plain(" ".join(paragraphs[0].split()))
    in_code = False
    for k, ch in enumerate(text):
        in_code ^= ch == "`"
        ends = k + 1 == len(text) or text[k + 1] == " "
        if ch == "." and not in_code and ends and not text[:k].endswith(("e.g", "i.e")):
            text = text[:k + 1]
            break
    text = text.rstrip(":,; ")
    return text if len(text) > 12 and text.count("`") % 2 == 0 else None


def pytorch_doc(o: schema.Overload) -> str | None:
    import torch
    import torch.nn.functional as F

    name = o.name
    owners = [(torch.linalg, "linalg_"), (torch.fft, "fft_"), (torch.special, "special_"), (torch, ""),
              (torch.Tensor, ""), (F, "")]
    for candidate in (name, name.removesuffix("_")):
        for owner, prefix in owners:
            if prefix and not candidate.startswith(prefix):
                continue
            doc = getattr(getattr(owner, candidate[len(prefix):], None), "__doc__", None)
            if doc and (text := first_sentence(doc)):
                return text
    return None


def sentence(o: schema.Overload) -> str:
    """The op's sentence; an error (exit) when it has none."""
    text = pytorch_doc(o) or pattern(o) or OWN.get(o.name.removesuffix("_"))
    if not text:
        raise SystemExit(f"op_docs: no sentence for {o.full_name}: PyTorch documents none; give it one in OWN")
    if not text.endswith((".", ")", "`")):
        text += "."
    return text.replace("*/", "* /")  # never the end of a C comment
