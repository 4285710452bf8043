"""The reviewed allow-list of DuckDB functions agent SQL may call, by category.

A function is admitted only when it is listed here *and* the running DuckDB has it. Deliberately absent (reviewed and
refused): anything taking SQL text or a function name (`json_serialize_plan`, `json_*_sql`, `query*`, `list_aggr`,
`aggregate`, `apply`, `invoke`), the catalog, settings, session state and logs (`current_setting`, `duckdb_*`,
`pragma_*`, `pg_*`, `getvariable`, `version`, `setval`, `inet_*`), files and paths (`read_*`, `glob`, `parse_path`),
builders of values of caller-chosen size that DuckDB's `memory_limit` does not cover (`printf`, `format`,
`bitstring`, `bitstring_agg`, `repeat`, `lpad`, `rpad`, `range`, `generate_series`, `list_resize`, `fill`),
aggregate-state internals (`finalize`, `combine`, `to_aggregate_state`), type builders, collation functions,
geometry, variant and debugging helpers, and what an EHR query has no use for (`bar`, `to_base`, `equi_width_bins`).

Functions whose work follows the shape of a caller-built value (JSON nesting, string length) are reviewed in
`sqlfunctions.yaml`, each with its reason and measurement: `refused` ones are never admitted (json_contains recursed
into a SIGSEGV); `bounded` ones are admitted with a per-call cap on their text arguments (sqlcheck enforces it).
"""

from __future__ import annotations

from pathlib import Path

import yaml

_CATEGORIES = {
    "operators": """
        != !__postfix !~~ !~~* % & && * ** + - / // < <-> << <= <=> <@ = > >= >> @ @> ^ ^@ __between __cast
        | || ~ ~~ ~~* ~~~ add subtract multiply divide fdiv mod fmod xor""",
    "aggregate_window": """
        any_value approx_count_distinct approx_quantile approx_top_k arbitrary arg_max arg_max_null
        arg_max_nulls_last arg_min arg_min_null arg_min_nulls_last argmax argmin array_agg avg bit_and bit_or bit_xor
        bool_and bool_or corr count count_if count_star countif covar_pop covar_samp cume_dist dense_rank entropy
        favg first first_value fsum geomean geometric_mean group_concat histogram histogram_exact kahan_sum kurtosis
        kurtosis_pop lag last last_value lead list listagg mad max max_by mean median min min_by mode nth_value ntile
        percent_rank product quantile quantile_cont quantile_disc rank rank_dense regr_avgx regr_avgy regr_count
        regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy reservoir_quantile row_number sem skewness
        stddev stddev_pop stddev_samp string_agg sum sumkahan var_pop var_samp variance wavg weighted_avg""",
    "list_array": """
        array_append array_apply array_cat array_concat array_contains array_cosine_distance array_cosine_similarity
        array_cross_product array_distance array_distinct array_dot_product array_extract array_filter
        array_grade_up array_has array_has_all array_has_any array_indexof array_inner_product array_intersect
        array_length array_negative_dot_product array_negative_inner_product array_pop_back array_pop_front
        array_position array_prepend array_push_back array_push_front array_reduce array_reverse array_reverse_sort
        array_select array_slice array_sort array_to_string array_to_string_comma_default array_transform
        array_unique array_value array_where array_zip cardinality element_at filter flatten grade_up len
        list_any_value list_append list_apply list_approx_count_distinct list_avg list_bit_and list_bit_or
        list_bit_xor list_bool_and list_bool_or list_cat list_concat list_contains list_cosine_distance
        list_cosine_similarity list_count list_distance list_distinct list_dot_product list_element list_entropy
        list_extract list_filter list_first list_grade_up list_has list_has_all list_has_any list_histogram
        list_indexof list_inner_product list_intersect list_kurtosis list_kurtosis_pop list_last list_mad list_max
        list_median list_min list_mode list_negative_dot_product list_negative_inner_product list_pack
        list_position list_prepend list_product list_reduce list_reverse list_reverse_sort list_select list_sem
        list_skewness list_slice list_sort list_stddev_pop list_stddev_samp list_string_agg list_sum
        list_transform list_unique list_value list_var_pop list_var_samp list_where list_zip reduce""",
    "json": """
        array_to_json json json_array json_group_array json_group_object json_object json_quote json_valid
        row_to_json to_json""",
    "struct_map_union_enum": """
        enum_code enum_first enum_last enum_range enum_range_boundary map map_concat map_contains
        map_contains_entry map_contains_value map_entries map_extract map_extract_value map_from_entries map_keys
        map_values row struct_concat struct_contains struct_extract struct_extract_at struct_has struct_indexof
        struct_insert struct_keys struct_pack struct_position struct_update struct_values union_extract union_tag
        union_value""",
    "date_time": """
        age ago century current_date current_localtime current_localtimestamp date_add date_diff date_part
        date_sub date_trunc datediff datepart datesub datetrunc day dayname dayofmonth dayofweek dayofyear
        days_in_month decade epoch epoch_ms epoch_ns epoch_us era get_current_time get_current_timestamp hour
        isodow isoyear julian last_day make_date make_time make_timestamp make_timestamp_ms make_timestamp_ns
        make_timestamptz microsecond millennium millisecond minute month monthname nanosecond normalized_interval
        now quarter second strftime strptime time_bucket timezone timezone_hour timezone_minute to_centuries
        to_days to_decades to_hours to_microseconds to_millennia to_milliseconds to_minutes to_months to_quarters
        to_seconds to_timestamp to_weeks to_years today transaction_timestamp try_strptime week weekday
        weekofyear year yearweek""",
    "text": """
        ascii bit_length char_length character_length chr concat concat_ws contains damerau_levenshtein editdist3
        ends_with hamming ilike_escape instr jaccard jaro_similarity jaro_winkler_similarity lcase left
        left_grapheme length length_grapheme levenshtein like_escape lower ltrim mismatches nfc_normalize
        not_ilike_escape not_like_escape octet_length ord overlay position prefix regexp_escape regexp_extract
        regexp_extract_all regexp_full_match regexp_matches regexp_replace regexp_split_to_array replace reverse
        right right_grapheme rtrim split split_part starts_with str_split str_split_regex string_split
        string_split_regex string_to_array strip_accents strlen strpos substr substring substring_grapheme suffix
        translate trim ucase unicode upper url_decode url_encode""",
    "math": """
        abs acos acosh asin asinh atan atan2 atanh bin binom bit_count bit_position cbrt ceil ceiling cos cosh cot
        degrees even exp factorial floor gamma gcd get_bit greatest greatest_common_divisor isfinite isinf isnan
        lcm least least_common_multiple lgamma ln log log10 log2 nextafter pi pow power radians random round
        round_even roundbankers set_bit sign signbit sin sinh sqrt tan tanh trunc""",
    "conversion_hash_misc": """
        base64 decode encode format_bytes formatreadabledecimalsize formatreadablesize from_base64 from_binary
        from_hex gen_random_uuid hash hex if md5 md5_number md5_number_lower md5_number_upper nullif
        parse_formatted_bytes sha1 sha256 to_base64 to_binary to_hex unbin unhex uuid uuid_extract_timestamp
        uuid_extract_version uuidv4 uuidv7""",
}

_REVIEW = yaml.safe_load((Path(__file__).with_name("sqlfunctions.yaml")).read_text())
REFUSED: dict[str, str] = dict(_REVIEW["refused"])  # name -> why it is never admitted
BOUNDED: dict[str, int] = {name: int(entry["max_chars"]) for name, entry in _REVIEW["bounded"].items()}
ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    name for block in _CATEGORIES.values() for name in block.split() if name not in REFUSED
)
CATEGORY_OF: dict[str, str] = {name: category for category, block in _CATEGORIES.items() for name in block.split()}
