"""Fault-injection suite (issue 16): small models with a fault planted at a known op, dumped with
msprobe's PyTorch PrecisionDebugger (target = faulty run, golden = clean run), plus control pairs
(low precision against fp32, no fault).

* :mod:`.faultops` - functions recorded as custom APIs (``FaultOps.*``) whose forward or backward can be
  perturbed without changing the recorded op sequence;
* :mod:`.models` - a 2-block transformer, a small CNN and a 2-rank MLP, each taking a fault table;
* :mod:`.dist_worker` - the 2-rank gloo runs (torch.multiprocessing), with a faulty ``all_reduce``;
* :mod:`.hf` - faults planted in tiny ``transformers`` models (tests/real_models: llama, gpt2, t5, mixtral,
  bert, vit): changed attributes (eps, scaling, top_k), activations replaced by ``FaultOps``, user forward
  hooks, parameter-gradient hooks (``HF_CASES``; ``generate.py --family hf``);
* :mod:`.xf` - MindSpore target against a PyTorch golden: faults planted in a MindSpore model
  (tests/mindspore/xf_models.py, run in .venv-ms) compared with its PyTorch twin through -am/-cm/-lm (``XF_CASES``;
  ``python tests/fault_injection/xf.py OUT``, ``benchmarks/fault_score.py --family xf``);
* :mod:`.cases` - the cases and their expected culprits;
* :mod:`.generate` - writes every dump pair (``python tests/fault_injection/generate.py OUT``);
* :mod:`.evaluate` - runs ``msprobe compare -da`` on a pair and reads back what it named, and checks that
  colours, Result, summary and advisor agree.
"""
