import seawall


def test_all_is_sorted_and_complete() -> None:
    assert seawall.__all__ == sorted(seawall.__all__)
    for name in seawall.__all__:
        assert hasattr(seawall, name), name
    public = {n for n in dir(seawall) if not n.startswith("_")}
    # Every public attribute is either exported or a submodule.
    import types

    missing = {
        n
        for n in public - set(seawall.__all__)
        if not isinstance(getattr(seawall, n), types.ModuleType)
    }
    assert missing == set()
