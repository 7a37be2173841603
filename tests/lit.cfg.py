# lit configuration for Kiln's text tests: tests/ir (IR in, FileCheck out)
# and tests/error (inputs that must be rejected with a given message).
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".kir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["unit", "fuzz", "ops", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
config.substitutions.append(("%kiln", os.path.join(config.kiln_bin, "kiln")))
config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("%src", config.kiln_src))
