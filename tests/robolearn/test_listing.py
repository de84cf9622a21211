"""few(): the first few items of a list in a message, then how many more."""

from robolearn.listing import few


def test_few_shows_up_to_the_first_few_then_how_many_more():
    """Exactly ``shown`` items are all shown, with no "and 0 more"; one more is counted, not shown; none is said."""
    assert few([1, 2, 3, 4, 5]) == "1, 2, 3, 4, 5"
    assert few(range(7)) == "0, 1, 2, 3, 4 and 2 more"
    assert few(["a", "b", "c"], 2, sep="; ") == "a; b and 1 more"
    assert few([]) == "nothing"
