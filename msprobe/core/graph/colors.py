"""Legend colours and tool tips written into compare graphs (graph_and_tools.md A.6.7, 8.x values), and the
legend of msprobe's verdict colouring (the same colours and ranges, three of them used)."""

from __future__ import annotations

import json
from typing import Dict, Optional

SUMMARY_DESCRIPTION = "此节点所有输入输出的统计量相对误差, 值越大代表测量值与标杆值的偏差越大, 相对误差计算方式:|(测量值-标杆值)/标杆值|"
ONE_THOUSANDTH_TIP = "Tensor中的元素逐个与对应的标杆数据对比，相对误差小于千分之一的比例占总元素个数的比例，比例越接近1越好"
REAL_DATA_DESCRIPTION = (
    "此节点所有输入的最小双千分之一和所有输出的最小双千分之一的差值的绝对值, 代表双千指标的变化情况, "
    "值越大代表测量值与标杆值的偏差越大, 双千分之一指标计算方式：" + ONE_THOUSANDTH_TIP
)
MD5_SAME = "与标杆相比, 此节点所有输入输出的md5值相同"
MD5_DIFFERENT = "与标杆相比, 此节点任意输入输出的md5值不同"
NOT_MATCHED = "比对过程中节点未匹配上"
UNMATCHED_COLOR = "#C7C7C7"

# colour -> value range per mode ("summary", "all" = tensor, "md5"); ranges are [lo, hi) as the viewer reads them
_RANGES = (
    ("#FFFCF3", {"summary": [0, 0.2], "all": [0, 0.05], "md5": [1, 1]}),
    ("#FFEDBE", {"summary": [0.2, 0.4], "all": [0.05, 0.1]}),
    ("#FFDC7F", {"summary": [0.4, 0.6], "all": [0.1, 0.15]}),
    ("#FFC62E", {"summary": [0.6, 0.8], "all": [0.15, 0.2]}),
    ("#FF704D", {"summary": [0.8, 1], "all": [0.2, 1], "md5": [0, 0]}),
)

_TIPS = {
    "summary": {
        "Max diff": "NPU与标杆API统计信息比对，最大值的差值",
        "Min diff": "NPU与标杆API统计信息比对，最小值的差值",
        "Mean diff": "NPU与标杆API统计信息比对，平均值的差值",
        "L2norm diff": "NPU与标杆API统计信息比对，2范数（平方根）的差值",
    },
    "md5": {"md5": "数据MD5信息，用于比较两个数据信息是否完全一致"},
    "all": {
        "One Thousandth Err Ratio": ONE_THOUSANDTH_TIP,
        "Five Thousandths Err Ratio": "Tensor中的元素逐个与对应的标杆数据对比，相对误差小于千分之五的比例占总元素个数的比例，比例越接近1越好",
        "Cosine": "通过计算两个向量的余弦值来判断其相似度，数值越接近于1说明计算出的两个张量越相似，实际可接受阈值为大于0.99。"
                  "在计算中可能会存在nan，主要由于可能会出现其中一个向量为0",
        "MaxAbsErr": "当最大绝对误差越接近0表示其计算的误差越小，实际可接受阈值为小于0.001",
        "MaxRelativeErr": "当最大相对误差越接近0表示其计算的误差越小。当dump数据中存在0或Nan时，比对结果中最大相对误差则出现inf或Nan的情况，属于正常现象",
    },
}


# msprobe's verdict colouring (the default; --reference-colours gives the legend above): the same colours
# and value ranges, three of them used (docs/graph.md "Colours: msprobe's verdict")
GREEN, YELLOW, RED = "#FFFCF3", "#FFDC7F", "#FF704D"
VERDICT_DESCRIPTIONS = {
    GREEN: "msprobe verdict pass/noise: equal, or the node's inputs and outputs differ no more than their dtypes' "
           "rounding and the error received from earlier ops explain (the node's data holds the reference's "
           "precision index too)",
    YELLOW: "msprobe verdict warn: differs beyond rounding, but inherited from inputs that already differ after an "
            "error entered earlier (or not attributable, or requires_grad differs)",
    RED: "msprobe verdict fail: this node introduces a difference beyond its dtype's rounding (its inputs agree "
         "and its outputs do not; or a non-tensor argument differs; or NaN/inf on the target only; or a "
         "difference enters here from an unmatched op); see 'msprobe verdict' in its data and items",
}
_VERDICT_RANGES = {
    "summary": {GREEN: [0, 0.2], YELLOW: [0.4, 0.6], RED: [0.8, 1]},
    "all": {GREEN: [0, 0.05], YELLOW: [0.1, 0.15], RED: [0.2, 1]},
    "md5": {GREEN: [1, 1], YELLOW: [0.4, 0.6], RED: [0, 0]},
}
VERDICT_TIP = ("msprobe verdict of this item (msprobe compare's rule set, docs/compare.md): warn or fail and the "
               "reason; items without it pass or differ within rounding")


def _description(mode: str, color: str) -> str:
    if mode == "md5":
        return MD5_SAME if color == "#FFFCF3" else MD5_DIFFERENT
    return SUMMARY_DESCRIPTION if mode == "summary" else REAL_DATA_DESCRIPTION


def colors_for(mode: Optional[str], verdict: bool = False) -> Dict[str, dict]:
    """The ``Colors`` legend of a compare in ``mode`` (unmatched grey always last); ``verdict``: the legend
    of msprobe's verdict colouring."""
    out: Dict[str, dict] = {}
    if verdict and mode in _VERDICT_RANGES:
        for color, rng in _VERDICT_RANGES[mode].items():
            out[color] = {"value": rng, "description": VERDICT_DESCRIPTIONS[color]}
        out[UNMATCHED_COLOR] = {"value": [], "description": NOT_MATCHED}
        return out
    for color, ranges in _RANGES:
        if mode in ranges:
            out[color] = {"value": ranges[mode], "description": _description(mode, color)}
    out[UNMATCHED_COLOR] = {"value": [], "description": NOT_MATCHED}
    return out


def tool_tip(mode: Optional[str], verdict: bool = False) -> str:
    """``ToolTip``: a JSON text (not an object), ASCII-escaped like the reference's."""
    tips = _TIPS.get(mode or "", {})
    if verdict and mode in _VERDICT_RANGES:
        tips = dict(tips, **{"msprobe verdict": VERDICT_TIP})
    return json.dumps(tips)


def bucket(mode: str, value) -> Optional[str]:
    """The colour the viewer paints a node with ``precision_index`` = value (None: no index)."""
    if value is None:
        return None
    for color, ranges in _RANGES:
        r = ranges.get(mode)
        if r is None:
            continue
        lo, hi = r
        if lo <= value < hi or (hi == 1 and value == 1) or (lo == 0 and value == 0):
            return color
    return None
