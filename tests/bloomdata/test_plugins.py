"""bloomdata.plugins: the one loader of classes that configs name (readers, cleaning steps, callbacks)."""

import pytest

from bloomdata.errors import BloomstackError
from bloomdata.plugins import check_target, load_class, resolve


class Base:
    pass


class Mine(Base):
    pass


def test_a_target_loads_its_class_and_checks_the_interface():
    assert load_class("tests.bloomdata.test_plugins:Mine", Base, "steps[0]") is Mine
    with pytest.raises(BloomstackError, match=r"^steps\[1\] \(tests\.bloomdata\.test_plugins:Base\)"):
        load_class("tests.bloomdata.test_plugins:Base", Mine, "steps[1]")
    with pytest.raises(BloomstackError, match=r"^steps\[2\] \(tests\.nowhere:X\): cannot import it"):
        load_class("tests.nowhere:X", Base, "steps[2]")
    with pytest.raises(ValueError, match="not package.module:ClassName"):
        check_target("tests.bloomdata.test_plugins.Mine")


def test_a_short_name_is_a_builtin_and_a_colon_a_users_class():
    builtins = {"base": Base}
    assert resolve("base", builtins, Base, "x") is Base
    assert resolve("tests.bloomdata.test_plugins:Mine", builtins, Base, "x") is Mine
    with pytest.raises(BloomstackError, match=r"^readers\[0\]: unknown 'csvv'; choose one of base or name your own"):
        resolve("csvv", builtins, Base, "readers[0]")
