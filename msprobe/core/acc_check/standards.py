"""Which precision standard judges an API: the lists of the accuracy standards, torch-free.

This file is copied into every generated script (before the runtime), so it must stay plain Python.
"""
# API lists of the precision standards (first match wins, in this order); everything else is
# judged by the benchmark standard.  Integer and bool outputs always use binary consistency.
BINARY_APIS = frozenset("""
abs abs_ absolute absolute_ argmin bitwise_and bitwise_and_ broadcast_to ceil ceil_ equal fill_ flatten
floor floor_ gather greater greater_ greater_equal greater_equal_ histc isfinite isnan less less_ less_equal
less_equal_ logical_and logical_and_ logical_not logical_not_ logical_or logical_or_ masked_fill masked_fill_
max_pool3d maximum minimum neg neg_ nonzero not_equal not_equal_ one_hot pad relu reshape round round_ select
sign sign_ sort tile topk transpose transpose_ tril tril_ triu triu_ type_as""".split())
ABSOLUTE_APIS = frozenset("""
mul mul_ __mul__ __imul__ __rmul__ add add_ __add__ __iadd__ __radd__ div div_ __div__ __idiv__ divide
divide_ leaky_relu leaky_relu_ prelu reciprocal reciprocal_ rsqrt rsqrt_ square square_ sub sub_ rsub
__isub__ __sub__""".split())
ULP_APIS = frozenset("""
__matmul__ addbmm addbmm_ addmm addmm_ baddbmm baddbmm_ bilinear bmm chain_matmul hspmm linear matmul mm mv
smm sspaddmm""".split())
THOUSANDTH_APIS = frozenset(["conv1d", "conv2d"])

STANDARD_TITLES = {
    "binary": "Binary Equality Standard",
    "absolute": "Absolute Threshold Standard",
    "ulp": "ULP error Standard",
    "thousandth": "Thousandth Standard",
    "benchmark": "Benchmark Standard",
}


def standard_for(api_name):
    """The precision standard of an API by its bare name (e.g. 'linear', '__add__')."""
    for std, names in (("binary", BINARY_APIS), ("absolute", ABSOLUTE_APIS), ("ulp", ULP_APIS),
                       ("thousandth", THOUSANDTH_APIS)):
        if api_name in names:
            return std
    return "benchmark"


