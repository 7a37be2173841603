# lit configuration for Kiln's text tests: tests/ir (IR in, FileCheck out)
# and tests/error (inputs that must be rejected with a given message).
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".kir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["unit", "fuzz", "ops", "fixtures", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
# before %kiln, which is its prefix: the build's lib directory (tests/unit/fake_cuda.c's driver)
config.substitutions.append(("%kiln_lib", os.path.join(os.path.dirname(config.kiln_bin), "lib")))
config.substitutions.append(("%kiln", os.path.join(config.kiln_bin, "kiln")))
config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("%src", config.kiln_src))
# A C program linked against a model compiled by `kiln compile` must use the same
# sanitizers as the libkiln_rt.a inside that model.
config.substitutions.append(("%sanitize",
    "-fsanitize=address,undefined" if config.sanitize.upper() in ("ON", "1", "TRUE", "YES") else ""))
