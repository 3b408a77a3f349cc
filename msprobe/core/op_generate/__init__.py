"""op_generate, the framework-free part shared by the PyTorch and MindSpore generators: config, extraction
from dump.json, records -> case, the script's data block, and the runtime code every script carries."""
