(* The axioms each main theorem rests on; `make check` compares this file's output with
   assumptions.expected. *)
From Witcert Require Import Sum EForm Tanh TierA Merge DotFloat Quant Dither Shift Witness.
Print Assumptions e_form.
Print Assumptions e_form_exact_weights.
Print Assumptions tanh_bound.
Print Assumptions tier_a.
Print Assumptions band_norm_rope_interleaved.
Print Assumptions band_norm_rope_halves.
Print Assumptions merge_gives_log_A.
Print Assumptions a_minus_one_by_blocks.
Print Assumptions A_of_is_eform_A.
Print Assumptions dot_error.
Print Assumptions no_clipping.
Print Assumptions quantizer_error.
Print Assumptions cosh_le_exp_sq.
Print Assumptions dither_mgf.
Print Assumptions union_bound.
Print Assumptions errors_are_shifted_grid.
Print Assumptions bias_bound.
Print Assumptions fp32_shifted_uniform.
Print Assumptions fp32_error_mgf.
Print Assumptions witness_bound.
Print Assumptions row_norm_bound.
