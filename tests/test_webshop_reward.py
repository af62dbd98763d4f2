"""WebShop's score (docs/spec/environments.md §5.4 "Reward"): the formula, option matching and r_type branches."""

# On hand-built products whose value follows from the formula
#
#     score = r_type * (attribute matches + option matches + [price <= cap]) / (#attributes + #options + 1)

from __future__ import annotations

import pytest

from agentrl.envs.webshop.catalog import Goal, Product
from agentrl.envs.webshop.reward import get_reward, normalize_color, option_matches, token_set_ratio, type_reward


def make_product(**overrides) -> Product:
    fields = dict(
        asin="B000SOCKS1",
        title="Acme Cotton Crew Socks for Men",
        description="Soft cotton blend socks with a cushioned sole.",
        bullet_points=("Machine wash cold", "Reinforced heel and toe"),
        pricing=(12.0, 18.0),
        price_tag="$12.0 to $18.0",
        options={"color": ("black", "navy blue"), "size": ("large", "x-large")},
        attributes=("moisture wicking", "machine wash"),
        category="fashion",
        query="men's socks",
        product_category="Clothing, Shoes & Jewelry › Men › Clothing › Socks",
        main_image="",
    )
    fields.update(overrides)
    return Product(**fields)


def make_goal(**overrides) -> Goal:
    fields = dict(
        asin="B000SOCKS1",
        instruction_text="i want moisture wicking cotton blend socks with color: black, and size: large",
        attributes=("moisture wicking", "cotton blend"),
        goal_options={"color": "black", "size": "large"},
        price_upper=20.0,
        name="Acme Cotton Crew Socks for Men",
        category="fashion",
        query="men's socks",
        product_category="Clothing, Shoes & Jewelry › Men › Clothing › Socks",
    )
    fields.update(overrides)
    return Goal(**fields)


# ------------------------------------------------------------------------------------------- the formula
def test_the_goal_product_with_the_goal_options_under_the_cap_scores_one():
    # "moisture wicking" is a product attribute; "cotton blend" is a substring of the description: 2 of 2.
    score = get_reward(make_product(), make_goal(), price=15.0, chosen_options={"color": "black", "size": "large"})
    assert (score.attribute_matches, score.option_matches, score.r_price, score.r_type) == (2, 2, True, 1.0)
    assert score.score == 1.0


def test_price_above_the_cap_loses_exactly_one_share():
    score = get_reward(make_product(), make_goal(), price=25.0, chosen_options={"color": "black", "size": "large"})
    assert score.r_price is False
    assert score.score == pytest.approx(4 / 5)


def test_wrong_options_and_a_missing_attribute():
    # "navy blue" normalizes to "blue" (COLOR_SET order), which does not match "black".
    # "x-large" against ("size", "large"): token_set_ratio 83 (not > 85), so no match.
    product = make_product(description="Soft socks.")  # "cotton blend" no longer anywhere
    score = get_reward(product, make_goal(), price=15.0, chosen_options={"color": "navy blue", "size": "x-large"})
    assert (score.attribute_matches, score.option_matches) == (1, 0)
    assert score.score == pytest.approx((1 + 0 + 1) / 5)


def test_no_options_chosen_matches_no_option():
    score = get_reward(make_product(), make_goal(), price=15.0, chosen_options={})
    assert score.score == pytest.approx((2 + 0 + 1) / 5)
    assert score.r_option == 0.0


def test_a_goal_without_options_divides_by_attributes_plus_one():
    goal = make_goal(goal_options={}, attributes=("moisture wicking",))
    score = get_reward(make_product(), goal, price=15.0, chosen_options={})
    assert score.r_option is None
    assert score.score == 1.0


def test_human_goal_options_are_plain_values():
    goal = make_goal(goal_options=("black",))
    score = get_reward(make_product(), goal, price=15.0, chosen_options={"color": "black"})
    assert score.option_matches == 1 and score.score == 1.0


# --------------------------------------------------------------------------- option matching as the original
def test_synthetic_goal_options_compare_as_stringified_tuples():
    assert token_set_ratio("black", ("color", "black")) == 100
    # a chosen value that is a subset of the goal's tokens matches; the reverse does not
    assert token_set_ratio("large", ("size", "x-large")) == 100
    assert token_set_ratio("x-large", ("size", "large")) == 83
    assert option_matches(["large"], [("size", "x-large")]) == 1
    assert option_matches(["x-large"], [("size", "large")]) == 0


def test_normalize_color_substring_on_strings_and_equality_on_tuples():
    assert normalize_color("dark brown") == "brown"  # "brown" precedes "dark" in COLOR_SET
    assert normalize_color("navy | red") == "navy"
    assert normalize_color("rectangular") == "tan"  # the original's substring rule: rec-TAN-gular
    assert normalize_color("fashion black woman") == "ash"  # f-ASH-ion
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "jet black")) == ("color", "jet black")
    assert normalize_color("28 x 28") == "28 x 28"


def test_colour_normalization_can_fail_the_exact_option():
    # ("item shape", "rectangular") has no colour element, but the chosen "rectangular" normalizes to "tan".
    assert option_matches(["rectangular"], [("item shape", "rectangular")]) == 0
    assert option_matches(["r.brown2070"], [("color", "r.brown2070")]) == 0
    assert option_matches(["black"], [("color", "black")]) == 1


def test_token_set_ratio_preprocessing_matches_thefuzz():
    assert token_set_ratio("Gluten-Free", "gluten free") == 100
    assert token_set_ratio("", "x") == 0
    assert token_set_ratio("!!!", "x") == 0
    assert token_set_ratio("café", "caf") == 100  # code points 128-255 are dropped, as thefuzz 0.19 does
    assert token_set_ratio("high_heel", "high heel") < 100  # "_" is a word character for thefuzz




# --------------------------------------------------------------------------------------- r_type branches
OTHER_CATEGORY = "Electronics › Audio › Speakers"


def test_r_type_is_one_when_the_query_matches_unless_no_title_noun_is_shared():
    product = make_product(title="Bluetooth Speaker", product_category=OTHER_CATEGORY)  # no shared noun...
    kind = type_reward(product, make_goal(name="Acme Wool Beanie Hat"))
    assert kind.query_match and kind.title_score == 0.0 and kind.r_type == 0.0  # ...so title_score 0 wins
    product = make_product(title="Acme Beanie", product_category=OTHER_CATEGORY)
    kind = type_reward(product, make_goal(name="Acme Wool Beanie Hat"))  # 2 of 4 nouns
    assert kind.query_match and kind.title_score == 0.5 and kind.r_type == 1.0


def test_r_type_is_one_on_two_shared_category_levels():
    hats = "Clothing, Shoes & Jewelry › Men › Hats"
    product = make_product(title="Acme Wool Beanie Hat", query="hats", product_category=hats)
    kind = type_reward(product, make_goal())
    assert (kind.query_match, kind.category_match, kind.title_score) == (False, True, pytest.approx(0.2))
    assert kind.r_type == 1.0


def test_r_type_is_half_without_query_category_or_title_agreement():
    product = make_product(title="Acme Wool Beanie Hat", query="hats", product_category=OTHER_CATEGORY)
    kind = type_reward(product, make_goal())  # title_score 1/5 = 0.2: not > 0.2, not < 0.1
    assert kind.r_type == 0.5
    score = get_reward(product, make_goal(), price=15.0, chosen_options={"color": "black", "size": "large"})
    # attributes: "moisture wicking" (attribute) and "cotton blend" (description) still match
    assert score.score == pytest.approx(0.5 * (2 + 2 + 1) / 5)


def test_r_type_is_a_tenth_below_title_score_0_1():
    goal_name = "Acme Socks Shoes Boots Hats Gloves Scarves Belts Ties Vests Coats"  # 11 nouns
    product = make_product(title="Acme Speaker", query="speakers", product_category=OTHER_CATEGORY)
    kind = type_reward(product, make_goal(name=goal_name))
    assert kind.title_score == pytest.approx(1 / 11) and kind.r_type == 0.1


def test_r_type_is_zero_without_shared_nouns_even_if_the_query_matches():
    product = make_product(title="Bluetooth Speaker")
    kind = type_reward(product, make_goal())
    assert kind.query_match and kind.category_match and kind.r_type == 0.0
    assert get_reward(product, make_goal(), 15.0, {"color": "black", "size": "large"}).score == 0.0
