(** The quantizer's deterministic error (docs/certificate.md §4.1), for the exact binary32
    operation sequence of the write and read paths: [y = fl(x / sb)], [z = fl(y + ξ)],
    [k = rint(z)] (ties to even), [w = fl(k − ξ)], [x̂ = fl(sb · w)], each [fl] Flocq's binary32
    round-to-nearest-even, underflow included.  For a scale [sb] at least fp16's smallest positive
    value with [|x| ≤ 126.5 (1 + u) sb] (the fp16 scale rounded up from [fl(amax / 126.5)]) and any
    dither value [|ξ| ≤ 1/2], whatever its number of bits:
    - no clipping: [|k| ≤ 127];
    - [|x̂ − x| ≤ (1/2 + 2^-15) · sb]. *)

From Coq Require Import Reals Lra Lia Psatz ZArith.
From Flocq Require Import Core Relative.
From Witcert Require Import DotFloat.
Open Scope R_scope.

Definition tiny32 : R := bpow radix2 (-150).

Lemma u32_val : u32 = / 16777216.
Proof. unfold u32. simpl. lra. Qed.

Lemma tiny32_pos : 0 < tiny32.
Proof. apply bpow_gt_0. Qed.

Lemma tiny32_small : tiny32 <= / 16777216 * / 16777216 * / 16777216.
Proof. unfold tiny32. simpl. lra. Qed.

(** One binary32 rounding anywhere, subnormals included: relative [u] plus absolute [2^-150]. *)
Lemma rnd32_abs x : Rabs (rnd32 x - x) <= u32 * Rabs x + tiny32.
Proof.
  destruct (relative_error_N_FLT'_ex radix2 (-149) 24 ltac:(lia) (fun z => negb (Z.even z)) x)
    as (eps & eta & He & Hn & _ & Hr).
  unfold rnd32. rewrite Hr.
  replace (x * (1 + eps) + eta - x) with (x * eps + eta) by ring.
  eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_mult.
  assert (Heps : Rabs eps <= u32).
  { eapply Rle_trans; [exact He|]. unfold u_ro. rewrite u32_val. simpl. lra. }
  assert (Heta : Rabs eta <= tiny32) by (eapply Rle_trans; [exact Hn|]; unfold tiny32; simpl; lra).
  assert (Rabs x * Rabs eps <= u32 * Rabs x)
    by (rewrite Rmult_comm; apply Rmult_le_compat_r; [apply Rabs_pos | exact Heps]).
  lra.
Qed.

Definition rint32 (z : R) : Z := Znearest (fun n => negb (Z.even n)) z.

Lemma rint32_half z : Rabs (IZR (rint32 z) - z) <= / 2.
Proof. unfold rint32. rewrite Rabs_minus_sym. apply Znearest_half. Qed.

Section Quantizer.
Variables x sb xi : R.
Hypothesis Hsb : bpow radix2 (-24) <= sb.
Hypothesis Hx : Rabs x <= 126.5 * (1 + u32) * sb.
Hypothesis Hxi : Rabs xi <= / 2.

Definition q_y := rnd32 (x / sb).
Definition q_z := rnd32 (q_y + xi).
Definition q_k := rint32 q_z.
Definition q_w := rnd32 (IZR q_k - xi).
Definition q_xhat := rnd32 (sb * q_w).

Lemma sb_pos : 0 < sb.
Proof. eapply Rlt_le_trans; [apply bpow_gt_0 | exact Hsb]. Qed.

Lemma bound_scaled (v M : R) : Rabs (rnd32 v - v) <= u32 * Rabs v + tiny32 -> Rabs v <= M ->
  Rabs (rnd32 v - v) <= u32 * M + tiny32.
Proof. intros H HM. pose proof u32_pos. assert (u32 * Rabs v <= u32 * M) by (apply Rmult_le_compat_l; lra). lra. Qed.

Let Y0 := 126.5 * (1 + u32).

Lemma q_steps :
  Rabs (q_y - x / sb) <= u32 * Y0 + tiny32 /\
  Rabs (q_z - (q_y + xi)) <= u32 * (Y0 + (u32 * Y0 + tiny32) + / 2) + tiny32 /\
  Rabs (IZR q_k - q_z) <= / 2.
Proof.
  pose proof sb_pos as Hs.
  assert (Hxs : Rabs (x / sb) <= Y0).
  { unfold Rdiv. rewrite Rabs_mult, (Rabs_pos_eq (/ sb)) by (apply Rlt_le, Rinv_0_lt_compat, Hs).
    apply (Rmult_le_reg_r sb); [exact Hs|]. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra. unfold Y0. lra. }
  assert (E1 : Rabs (q_y - x / sb) <= u32 * Y0 + tiny32) by (apply bound_scaled; [apply rnd32_abs | exact Hxs]).
  split; [exact E1|]. split; [|apply rint32_half].
  apply bound_scaled; [apply rnd32_abs|].
  eapply Rle_trans; [apply Rabs_triang|].
  assert (Rabs q_y <= Y0 + (u32 * Y0 + tiny32)).
  { replace q_y with (x / sb + (q_y - x / sb)) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  lra.
Qed.

Theorem no_clipping : (Z.abs q_k <= 127)%Z.
Proof.
  destruct q_steps as (E1 & E2 & E3).
  pose proof u32_val. pose proof tiny32_pos. pose proof tiny32_small.
  assert (Hk : Rabs (IZR q_k) < 128).
  { assert (Rabs q_y <= Y0 + (u32 * Y0 + tiny32)).
    { assert (Rabs (x / sb) <= Y0).
      { pose proof sb_pos as Hs. unfold Rdiv. rewrite Rabs_mult, (Rabs_pos_eq (/ sb)) by (apply Rlt_le, Rinv_0_lt_compat, Hs).
        apply (Rmult_le_reg_r sb); [exact Hs|]. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra. unfold Y0. lra. }
      replace q_y with (x / sb + (q_y - x / sb)) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
    assert (Rabs q_z <= Rabs (q_y + xi) + Rabs (q_z - (q_y + xi))).
    { replace q_z with ((q_y + xi) + (q_z - (q_y + xi))) at 1 by ring. apply Rabs_triang. }
    assert (Rabs (q_y + xi) <= Rabs q_y + Rabs xi) by apply Rabs_triang.
    assert (Rabs (IZR q_k) <= Rabs q_z + Rabs (IZR q_k - q_z)).
    { replace (IZR q_k) with (q_z + (IZR q_k - q_z)) at 1 by ring. apply Rabs_triang. }
    unfold Y0 in *. rewrite H in *. lra. }
  rewrite <- abs_IZR in Hk. apply lt_IZR in Hk. lia.
Qed.

Theorem quantizer_error : Rabs (q_xhat - x) <= (/ 2 + bpow radix2 (-15)) * sb.
Proof.
  destruct q_steps as (E1 & E2 & E3).
  pose proof sb_pos as Hs. pose proof u32_pos. pose proof tiny32_pos. pose proof tiny32_small.
  pose proof no_clipping as Hc.
  assert (Hk : Rabs (IZR q_k) <= 127) by (rewrite <- abs_IZR; apply IZR_le in Hc; exact Hc).
  assert (HW : Rabs (IZR q_k - xi) <= 127.5).
  { unfold Rminus. eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_Ropp. lra. }
  assert (E4 : Rabs (q_w - (IZR q_k - xi)) <= u32 * 127.5 + tiny32)
    by (apply bound_scaled; [apply rnd32_abs | exact HW]).
  assert (HWa : Rabs q_w <= 127.5 + (u32 * 127.5 + tiny32)).
  { replace q_w with ((IZR q_k - xi) + (q_w - (IZR q_k - xi))) by ring.
    eapply Rle_trans; [apply Rabs_triang|]. lra. }
  assert (E5 : Rabs (q_xhat - sb * q_w) <= u32 * (sb * (127.5 + (u32 * 127.5 + tiny32))) + tiny32).
  { apply bound_scaled; [apply rnd32_abs|]. rewrite Rabs_mult, (Rabs_pos_eq sb) by lra.
    apply Rmult_le_compat_l; lra. }
  (* x̂ − x = (x̂ − sb w) + sb (w − (k − ξ)) + sb (k − z) + sb (z − (y + ξ)) + sb (y − x / sb) *)
  assert (Hdec : q_xhat - x = (q_xhat - sb * q_w) + sb * ((q_w - (IZR q_k - xi)) + (IZR q_k - q_z)
                                + (q_z - (q_y + xi)) + (q_y - x / sb))) by (field; lra).
  rewrite Hdec.
  eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_mult, (Rabs_pos_eq sb) by lra.
  set (e := q_w - (IZR q_k - xi) + (IZR q_k - q_z) + (q_z - (q_y + xi)) + (q_y - x / sb)).
  assert (He : Rabs e <= (u32 * 127.5 + tiny32) + / 2 + (u32 * (Y0 + (u32 * Y0 + tiny32) + / 2) + tiny32)
                         + (u32 * Y0 + tiny32)).
  { unfold e. repeat (eapply Rle_trans; [apply Rabs_triang|]; apply Rplus_le_compat; [|assumption]). exact E4. }
  assert (sb * Rabs e <= sb * ((u32 * 127.5 + tiny32) + / 2 + (u32 * (Y0 + (u32 * Y0 + tiny32) + / 2) + tiny32)
                         + (u32 * Y0 + tiny32))) by (apply Rmult_le_compat_l; lra).
  replace (bpow radix2 (-15)) with (/ 32768) by (simpl; lra).
  unfold Y0 in *. rewrite u32_val in *.
  assert (Hsb' : / 16777216 <= sb) by (replace (/ 16777216) with (bpow radix2 (-24)) by (simpl; lra); exact Hsb).
  nra.
Qed.

End Quantizer.
