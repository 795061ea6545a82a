(** The Tier-A witness bounds the band's residual norm (docs/certificate.md §3), over Flocq's
    binary32 and binary16: with [ρ_c = rn(r_c)] (each exact residual rounded once to nearest),
    [t_c = (ρ_c·ρ_c)↑], the running sum [acc ← (acc + t_c)↑] in any order, [a = (√acc)↑],
    [w = rn(a·(1 + 2^-20))] and [w16 = w↑] in binary16, [||r|| ≤ w16].

    Underflow is an assumption here, as in [DotFloat]: every residual is zero or a normal binary32
    number, and so is [a·(1 + 2^-20)].  The write path meets it (a non-zero residual is at least
    [2^-49], so every square, sum and root is normal: docs/certificate.md §3, step 1); that is also
    why flush-to-zero, which Flocq does not model, changes nothing there. *)

From Coq Require Import Reals Lra Lia Psatz List.
From Flocq Require Import Core Relative.
From Witcert Require Import DotFloat.
Import ListNotations.
Open Scope R_scope.

Local Instance prec_binary32 : Prec_gt_0 24.
Proof. unfold Prec_gt_0. lia. Qed.
Local Instance prec_binary16 : Prec_gt_0 11.
Proof. unfold Prec_gt_0. lia. Qed.

Definition ru32 (x : R) : R := round radix2 (FLT_exp (-149) 24) Zceil x.
Definition ru16 (x : R) : R := round radix2 (FLT_exp (-24) 11) Zceil x.
Definition margin : R := 1 + bpow radix2 (-20).

Lemma ru32_ge x : x <= ru32 x.
Proof. exact (proj1 (proj2 (round_UP_pt radix2 (FLT_exp (-149) 24) x))). Qed.

Lemma ru16_ge x : x <= ru16 x.
Proof. exact (proj1 (proj2 (round_UP_pt radix2 (FLT_exp (-24) 11) x))). Qed.

(** The running sum, every addition rounded up, in list order. *)
Fixpoint sum_up (acc : R) (t : list R) : R :=
  match t with
  | [] => acc
  | x :: l => sum_up (ru32 (acc + x)) l
  end.

Definition sumsq (l : list R) : R := fold_right (fun x s => x * x + s) 0 l.

Lemma sum_up_ge t : forall acc, acc + fold_right Rplus 0 t <= sum_up acc t.
Proof.
  induction t as [| x l IH]; intros acc; simpl.
  - lra.
  - specialize (IH (ru32 (acc + x))). pose proof (ru32_ge (acc + x)). lra.
Qed.

(** The rounded-up squares of the rounded residuals sum to at least [Σ ρ_c²]. *)
Lemma squares_up_ge (r : list R) :
  sumsq (map rnd32 r) <= fold_right Rplus 0 (map (fun x => ru32 (rnd32 x * rnd32 x)) r).
Proof.
  induction r as [| x l IH]; simpl.
  - lra.
  - pose proof (ru32_ge (rnd32 x * rnd32 x)). lra.
Qed.

Lemma sumsq_nonneg l : 0 <= sumsq l.
Proof. induction l as [| x l IH]; simpl; nra. Qed.

(** One rounding to nearest loses at most a factor [1 − u] of a magnitude. *)
Lemma residual_scaled (r : list R) :
  Forall normal32 r -> (1 - u32) * (1 - u32) * sumsq r <= sumsq (map rnd32 r).
Proof.
  pose proof u32_pos as Hu. pose proof u32_small as Hs.
  induction r as [| x l IH]; intros Hn; simpl.
  - lra.
  - inversion Hn as [| ? ? Hx Hl]; subst.
    specialize (IH Hl).
    pose proof (rnd32_rel x Hx) as Hr.
    (* |ρ| ≥ (1 − u)|x| *)
    assert (Ha : (1 - u32) * Rabs x <= Rabs (rnd32 x)).
    { pose proof (Rabs_triang_inv x (x - rnd32 x)) as T.
      replace (x - (x - rnd32 x)) with (rnd32 x) in T by ring.
      rewrite <- Rabs_Ropp in Hr. replace (- (rnd32 x - x)) with (x - rnd32 x) in Hr by ring. lra. }
    assert (Hx0 : 0 <= (1 - u32) * Rabs x) by (apply Rmult_le_pos; [lra | apply Rabs_pos]).
    assert (Hsq : ((1 - u32) * Rabs x) * ((1 - u32) * Rabs x) <= Rabs (rnd32 x) * Rabs (rnd32 x))
      by (apply Rmult_le_compat; lra).
    assert (E1 : Rabs x * Rabs x = x * x) by (rewrite <- Rabs_mult; apply Rabs_pos_eq; nra).
    assert (E2 : Rabs (rnd32 x) * Rabs (rnd32 x) = rnd32 x * rnd32 x)
      by (rewrite <- Rabs_mult; apply Rabs_pos_eq; nra).
    assert (E : ((1 - u32) * Rabs x) * ((1 - u32) * Rabs x) = (1 - u32) * (1 - u32) * (x * x))
      by (rewrite <- E1; ring).
    lra.
Qed.

Lemma sqrt_le_of_sq a b : 0 <= b -> a <= b * b -> sqrt a <= b.
Proof.
  intros Hb Hab. rewrite <- (sqrt_square b Hb). apply sqrt_le_1_alt. exact Hab.
Qed.

(** The witness bounds the residual norm. *)
Theorem witness_bound (r : list R) :
  Forall normal32 r ->
  let acc := sum_up 0 (map (fun x => ru32 (rnd32 x * rnd32 x)) r) in
  let a := ru32 (sqrt acc) in
  normal32 (a * margin) ->
  sqrt (sumsq r) <= ru16 (rnd32 (a * margin)).
Proof.
  intros Hn acc a Ha.
  pose proof u32_pos as Hu. pose proof u32_small as Hs.
  assert (Hacc : sumsq (map rnd32 r) <= acc).
  { pose proof (squares_up_ge r). pose proof (sum_up_ge (map (fun x => ru32 (rnd32 x * rnd32 x)) r) 0).
    unfold acc. lra. }
  assert (Ha0 : sqrt acc <= a) by apply ru32_ge.
  assert (Hsa : sqrt (sumsq (map rnd32 r)) <= a).
  { pose proof (sqrt_le_1_alt _ _ Hacc). lra. }
  assert (Hapos : 0 <= a) by (pose proof (sqrt_pos acc); lra).
  (* ||r|| ≤ a / (1 − u) *)
  assert (Hr : sqrt (sumsq r) <= a / (1 - u32)).
  { apply sqrt_le_of_sq.
    - apply Rmult_le_pos; [lra | apply Rlt_le, Rinv_0_lt_compat; lra].
    - pose proof (residual_scaled r Hn) as Hsc.
      pose proof (sumsq_nonneg (map rnd32 r)) as Hq0.
      assert (Hq : sumsq (map rnd32 r) <= a * a).
      { rewrite <- (sqrt_sqrt (sumsq (map rnd32 r)) Hq0).
        apply Rmult_le_compat; try apply sqrt_pos; lra. }
      assert (H1u : 0 < (1 - u32) * (1 - u32)) by nra.
      replace (a / (1 - u32) * (a / (1 - u32))) with (a * a / ((1 - u32) * (1 - u32))) by (field; lra).
      apply (Rmult_le_reg_l ((1 - u32) * (1 - u32))); [exact H1u|].
      replace ((1 - u32) * (1 - u32) * (a * a / ((1 - u32) * (1 - u32)))) with (a * a) by (field; lra).
      lra. }
  (* rn(a·margin) ≥ a·margin·(1 − u) ≥ a / (1 − u) *)
  pose proof (rnd32_rel (a * margin) Ha) as Hw.
  assert (Hm : 0 < margin) by (unfold margin; pose proof (bpow_gt_0 radix2 (-20)); lra).
  rewrite (Rabs_pos_eq (a * margin)) in Hw by (apply Rmult_le_pos; lra).
  assert (Hw' : a * margin * (1 - u32) <= rnd32 (a * margin)).
  { rewrite Rabs_minus_sym in Hw. pose proof (Rle_abs (a * margin - rnd32 (a * margin))). nra. }
  assert (Hmu : 1 <= margin * (1 - u32) * (1 - u32)).
  { unfold margin, u32. simpl. lra. }
  assert (Hdiv : a / (1 - u32) <= a * margin * (1 - u32)).
  { apply (Rmult_le_reg_l (1 - u32)); [lra|].
    replace ((1 - u32) * (a / (1 - u32))) with a by (field; lra).
    replace ((1 - u32) * (a * margin * (1 - u32))) with (a * (margin * (1 - u32) * (1 - u32))) by ring.
    nra. }
  pose proof (ru16_ge (rnd32 (a * margin))). lra.
Qed.

(** An fp16 store's stored row norm (docs/certificate.md §10.1) bounds the row's norm: over a row of
    binary16 values [x_c], [N = (√acc)↑] with [acc ← (acc + rn(x_c·x_c))↑] in channel order.  Each
    square is a binary32 number (an 11-bit significand squared has at most 22 bits, and the
    exponent stays above binary32's least), so its rounding is the identity and [N ≥ ||x||] holds
    without a premise on underflow. *)
Definition binary16 (x : R) : Prop := generic_format radix2 (FLT_exp (-24) 11) x.

Lemma binary16_square_exact x : binary16 x -> rnd32 (x * x) = x * x.
Proof.
  intros Hx.
  unfold rnd32. apply round_generic; [apply valid_rnd_N |].
  apply FLT_format_generic in Hx; [| exact prec_binary16].
  destruct Hx as [f Hf Hm He].
  apply generic_format_FLT.
  apply (FLT_spec _ _ _ _ (Float radix2 (Fnum f * Fnum f) (Fexp f + Fexp f))).
  - rewrite Hf. unfold F2R. simpl. rewrite mult_IZR, bpow_plus. ring.
  - simpl. rewrite Z.abs_mul.
    assert (H11 : (Z.abs (Fnum f) < 2 ^ 11)%Z) by (simpl in Hm; exact Hm).
    assert (H0 : (0 <= Z.abs (Fnum f))%Z) by apply Z.abs_nonneg.
    simpl. nia.
  - simpl in He |- *. lia.
Qed.

Theorem row_norm_bound (xs : list R) :
  Forall binary16 xs ->
  sqrt (sumsq xs) <= ru32 (sqrt (sum_up 0 (map (fun x => rnd32 (x * x)) xs))).
Proof.
  intros Hb.
  assert (Hmap : map (fun x => rnd32 (x * x)) xs = map (fun x => x * x) xs).
  { induction Hb as [| x l Hx Hl IH]; simpl; [reflexivity |].
    rewrite (binary16_square_exact x Hx), IH. reflexivity. }
  rewrite Hmap.
  assert (Hsum : sumsq xs = fold_right Rplus 0 (map (fun x => x * x) xs)).
  { clear. induction xs as [| x l IH]; simpl; [reflexivity | rewrite IH; reflexivity]. }
  pose proof (sum_up_ge (map (fun x => x * x) xs) 0) as Hge.
  assert (Hacc : sumsq xs <= sum_up 0 (map (fun x => x * x) xs)) by lra.
  pose proof (sqrt_le_1_alt _ _ Hacc).
  pose proof (ru32_ge (sqrt (sum_up 0 (map (fun x => x * x) xs)))).
  lra.
Qed.
