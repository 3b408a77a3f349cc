"""Training monitor, framework-free part: config validation, names, anomaly rules, CSV / TensorBoard writers,
the csv-to-TensorBoard converter and the anomaly sorter.  The PyTorch side is msprobe.pytorch.monitor."""
