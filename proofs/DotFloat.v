(** The evaluation term of an fp32 dot product (docs/certificate.md §10.1), over Flocq's binary32
    with round-to-nearest-even: for any order and grouping of the sum — any binary tree of
    additions, fused multiply-adds included — with no rounded result below the normal range,
    [|fl(Σ a_i b_i) − Σ a_i b_i| ≤ γ_n Σ |a_i b_i|], [γ_n = n u/(1 − n u)], [u = 2^-24], where
    [n] is the number of products.

    Underflow is an assumption here ([no_underflow]): every rounded intermediate is zero or at
    least [2^-126] in magnitude.  The kernels make it hold by rescaling the query by a power of two
    (docs/certificate.md §10.2); that step is argued in the prose, not in Coq. *)

From Coq Require Import Reals Lra Lia Psatz ZArith.
From Flocq Require Import Core Relative.
Open Scope R_scope.

Definition u32 : R := bpow radix2 (-24).
Definition rnd32 (x : R) : R := round radix2 (FLT_exp (-149) 24) ZnearestE x.
Definition normal32 (x : R) : Prop := x = 0 \/ bpow radix2 (-126) <= Rabs x.

Lemma u32_pos : 0 < u32.
Proof. apply bpow_gt_0. Qed.

Lemma u32_small : u32 <= / 1024.
Proof. unfold u32. simpl. lra. Qed.

(** One rounding: relative error at most [u] on the normal range and at zero. *)
Lemma rnd32_rel x : normal32 x -> Rabs (rnd32 x - x) <= u32 * Rabs x.
Proof.
  intros [-> | H].
  - unfold rnd32. rewrite round_0 by apply valid_rnd_N. rewrite Rminus_0_r, Rabs_R0. lra.
  - assert (H' : bpow radix2 (-149 + 24 - 1) <= Rabs x) by (simpl in *; lra).
    pose proof (relative_error_N_FLT radix2 (-149) 24 ltac:(lia) (fun z => negb (Z.even z)) x H') as Hr.
    unfold rnd32. replace u32 with (/ 2 * bpow radix2 (- 24 + 1)) by (unfold u32; simpl; lra). exact Hr.
Qed.

Definition gamma (k : nat) : R := INR k * u32 / (1 - INR k * u32).

Lemma gamma_nonneg k : INR k * u32 < 1 -> 0 <= gamma k.
Proof.
  intros H. unfold gamma, Rdiv. apply Rmult_le_pos.
  - apply Rmult_le_pos; [apply pos_INR | apply Rlt_le, u32_pos].
  - apply Rlt_le, Rinv_0_lt_compat. lra.
Qed.

Lemma gamma_mono j k : (j <= k)%nat -> INR k * u32 < 1 -> gamma j <= gamma k.
Proof.
  intros Hjk Hk. unfold gamma.
  assert (Hle : INR j <= INR k) by (apply le_INR, Hjk).
  pose proof u32_pos. pose proof (pos_INR j).
  assert (INR j * u32 <= INR k * u32) by (apply Rmult_le_compat_r; lra).
  unfold Rdiv. apply Rmult_le_compat; try lra.
  - apply Rmult_le_pos; lra.
  - apply Rlt_le, Rinv_0_lt_compat. lra.
  - apply Rinv_le_contravar; lra.
Qed.

(** One more rounding on top of [k]: [γ_k + u(1 + γ_k) ≤ γ_{k+1}]. *)
Lemma gamma_step k : INR (S k) * u32 < 1 -> gamma k + u32 * (1 + gamma k) <= gamma (S k).
Proof.
  intros H. rewrite S_INR in H. unfold gamma. rewrite S_INR.
  pose proof u32_pos as Hu. pose proof (pos_INR k) as Hk0.
  set (K := INR k) in *.
  assert (H1 : 0 < 1 - K * u32) by nra.
  assert (H2 : 0 < 1 - (K + 1) * u32) by lra.
  replace (K * u32 / (1 - K * u32) + u32 * (1 + K * u32 / (1 - K * u32))) with ((K + 1) * u32 / (1 - K * u32))
    by (field; lra).
  unfold Rdiv. apply Rmult_le_compat_l; [nra|]. apply Rinv_le_contravar; [exact H2 | nra].
Qed.

Inductive dot := Prod (i : nat) | Add (l r : dot) | Fma (i : nat) (e : dot).

Section Dot.
Variables a b : nat -> R.

Fixpoint fl (e : dot) : R :=
  match e with
  | Prod i => rnd32 (a i * b i)
  | Add l r => rnd32 (fl l + fl r)
  | Fma i e => rnd32 (a i * b i + fl e)
  end.

Fixpoint exact (e : dot) : R :=
  match e with
  | Prod i => a i * b i
  | Add l r => exact l + exact r
  | Fma i e => a i * b i + exact e
  end.

Fixpoint absum (e : dot) : R :=
  match e with
  | Prod i => Rabs (a i * b i)
  | Add l r => absum l + absum r
  | Fma i e => Rabs (a i * b i) + absum e
  end.

(** Roundings on the longest path from a product to the result, and the number of products. *)
Fixpoint height (e : dot) : nat :=
  match e with
  | Prod _ => 1%nat
  | Add l r => S (Nat.max (height l) (height r))
  | Fma _ e => S (height e)
  end.

Fixpoint terms (e : dot) : nat :=
  match e with
  | Prod _ => 1%nat
  | Add l r => (terms l + terms r)%nat
  | Fma _ e => S (terms e)
  end.

Fixpoint no_underflow (e : dot) : Prop :=
  match e with
  | Prod i => normal32 (a i * b i)
  | Add l r => no_underflow l /\ no_underflow r /\ normal32 (fl l + fl r)
  | Fma i e => no_underflow e /\ normal32 (a i * b i + fl e)
  end.

Lemma exact_le_absum e : Rabs (exact e) <= absum e.
Proof.
  induction e; simpl; [lra| |]; eapply Rle_trans; try apply Rabs_triang; lra.
Qed.

Lemma height_le_terms e : (height e <= terms e)%nat.
Proof.
  assert (Hpos : forall e, (1 <= terms e)%nat) by (induction e0; simpl; lia).
  induction e; simpl; [lia| |lia].
  pose proof (Hpos e1). pose proof (Hpos e2). lia.
Qed.

(** The error after a rounding of [y], where [y] is within [γ_k·S] of the exact value and [S]
    bounds the exact value's terms. *)
Lemma one_more_rounding (y x M : R) k :
  normal32 y -> INR (S k) * u32 < 1 ->
  Rabs (y - x) <= gamma k * M -> Rabs x <= M ->
  Rabs (rnd32 y - x) <= gamma (S k) * M.
Proof.
  intros Hn Hk Hy Hx.
  assert (Hg : 0 <= gamma k) by (apply gamma_nonneg; rewrite S_INR in Hk; pose proof u32_pos; nra).
  pose proof (rnd32_rel y Hn) as Hr.
  assert (Hay : Rabs y <= (1 + gamma k) * M).
  { replace y with (x + (y - x)) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  pose proof (gamma_step k Hk). pose proof u32_pos.
  assert (0 <= M) by (pose proof (Rabs_pos x); lra).
  replace (rnd32 y - x) with ((rnd32 y - y) + (y - x)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  apply Rle_trans with (u32 * ((1 + gamma k) * M) + gamma k * M).
  - apply Rplus_le_compat; [|exact Hy]. eapply Rle_trans; [exact Hr|]. apply Rmult_le_compat_l; lra.
  - replace (u32 * ((1 + gamma k) * M) + gamma k * M) with ((gamma k + u32 * (1 + gamma k)) * M) by ring.
    apply Rmult_le_compat_r; lra.
Qed.

Theorem dot_error_height : forall e,
  no_underflow e -> INR (height e) * u32 < 1 ->
  Rabs (fl e - exact e) <= gamma (height e) * absum e.
Proof.
  induction e as [i | l IHl r IHr | i e IHe]; cbn [fl exact absum height no_underflow]; intros Hnu Hh.
  - replace (gamma 1) with (u32 / (1 - u32)) by (unfold gamma; simpl; field; pose proof u32_small; lra).
    eapply Rle_trans; [apply rnd32_rel, Hnu|].
    pose proof u32_pos. pose proof u32_small. pose proof (Rabs_pos (a i * b i)).
    assert (u32 <= u32 / (1 - u32)).
    { unfold Rdiv. rewrite <- (Rmult_1_r u32) at 1. apply Rmult_le_compat_l; [lra|].
      rewrite <- Rinv_1. apply Rinv_le_contravar; lra. }
    apply Rmult_le_compat_r; lra.
  - destruct Hnu as [Hl [Hr Hn]].
    set (k := Nat.max (height l) (height r)) in *.
    assert (Hk : INR k * u32 < 1) by (rewrite S_INR in Hh; pose proof u32_pos; nra).
    assert (Esub : forall e, no_underflow e -> (height e <= k)%nat ->
                   (no_underflow e -> INR (height e) * u32 < 1 -> Rabs (fl e - exact e) <= gamma (height e) * absum e) ->
                   Rabs (fl e - exact e) <= gamma k * absum e).
    { intros e He Hle IH. eapply Rle_trans; [apply IH; [exact He|]|].
      - apply Rle_lt_trans with (INR k * u32); [|exact Hk].
        apply Rmult_le_compat_r; [apply Rlt_le, u32_pos | apply le_INR; exact Hle].
      - apply Rmult_le_compat_r; [pose proof (exact_le_absum e); pose proof (Rabs_pos (exact e)); lra|].
        apply gamma_mono; [exact Hle | exact Hk]. }
    assert (El := Esub l Hl ltac:(unfold k; lia) IHl).
    assert (Er := Esub r Hr ltac:(unfold k; lia) IHr).
    apply one_more_rounding; [exact Hn | exact Hh | | ].
    + replace (fl l + fl r - (exact l + exact r)) with ((fl l - exact l) + (fl r - exact r)) by ring.
      eapply Rle_trans; [apply Rabs_triang|]. lra.
    + pose proof (exact_le_absum (Add l r)). simpl in H. exact H.
  - destruct Hnu as [He Hn].
    assert (Hk : INR (height e) * u32 < 1) by (rewrite S_INR in Hh; pose proof u32_pos; nra).
    specialize (IHe He Hk).
    apply one_more_rounding; [exact Hn | exact Hh | | ].
    + replace (a i * b i + fl e - (a i * b i + exact e)) with (fl e - exact e) by ring.
      eapply Rle_trans; [exact IHe|]. apply Rmult_le_compat_l; [apply gamma_nonneg, Hk|].
      pose proof (Rabs_pos (a i * b i)). lra.
    + pose proof (exact_le_absum (Fma i e)). simpl in H. exact H.
Qed.

(** The form the kernels use: [n] at least the number of products. *)
Theorem dot_error : forall e n,
  no_underflow e -> (terms e <= n)%nat -> INR n * u32 < 1 ->
  Rabs (fl e - exact e) <= gamma n * absum e.
Proof.
  intros e n Hnu Ht Hn.
  assert (Hh : (height e <= n)%nat) by (pose proof (height_le_terms e); lia).
  assert (Hhu : INR (height e) * u32 < 1).
  { apply Rle_lt_trans with (INR n * u32); [|exact Hn].
    apply Rmult_le_compat_r; [apply Rlt_le, u32_pos | apply le_INR, Hh]. }
  eapply Rle_trans; [apply dot_error_height; assumption|].
  apply Rmult_le_compat_r.
  - pose proof (exact_le_absum e). pose proof (Rabs_pos (exact e)). lra.
  - apply gamma_mono; assumption.
Qed.

End Dot.
