(** Tier A (docs/certificate.md §3): the logit error is bounded band by band,
    [|sm·q·r| ≤ sm Σ_b ||q_b||·w_b] for every query, once the stored witness [w_b] bounds [||r_b||];
    and the band norms do not change under RoPE (2×2 rotations within pairs, in both pair layouts:
    interleaved [(2k, 2k+1)] and halves [(k, k + m)]), so a witness of the stored post-RoPE row holds
    at every position. *)

From Coq Require Import Reals Lra Lia Psatz Arith.
From Witcert Require Import Sum.
Open Scope R_scope.

(** Channels [0 .. d−1]; channel [i] belongs to band [band i]. *)
Definition ind (band : nat -> nat) (b i : nat) : R := if Nat.eqb (band i) b then 1 else 0.

Definition band_norm (d : nat) (band : nat -> nat) (x : nat -> R) (b : nat) : R :=
  sqrt (sumn d (fun i => ind band b i * x i ^ 2)).

Lemma ind_sum_out band i nb : (nb <= band i)%nat -> sumn nb (fun b => ind band b i) = 0.
Proof.
  induction nb as [|nb IH]; intros H; simpl; [reflexivity|].
  rewrite IH by lia. unfold ind. destruct (Nat.eqb_spec (band i) nb); [lia | lra].
Qed.

Lemma ind_sum_one band i nb : (band i < nb)%nat -> sumn nb (fun b => ind band b i) = 1.
Proof.
  induction nb as [|nb IH]; intros H; [lia|]. simpl.
  destruct (Nat.eq_dec (band i) nb) as [E | E].
  - rewrite ind_sum_out by lia. unfold ind. rewrite E, Nat.eqb_refl. lra.
  - rewrite IH by lia. unfold ind. destruct (Nat.eqb_spec (band i) nb); [lia | lra].
Qed.

(** A sum over channels is the sum over bands of the sums within each band. *)
Lemma sum_by_bands d nb band f :
  (forall i, (i < d)%nat -> (band i < nb)%nat) ->
  sumn d f = sumn nb (fun b => sumn d (fun i => ind band b i * f i)).
Proof.
  intros H. rewrite sumn_swap. apply sumn_ext. intros i Hi.
  rewrite (sumn_ext nb (fun b => ind band b i * f i) (fun b => f i * ind band b i)) by (intros; ring).
  rewrite sumn_scal, ind_sum_one by (apply H, Hi). ring.
Qed.

Lemma ind_idem band b i : ind band b i * ind band b i = ind band b i.
Proof. unfold ind. destruct (Nat.eqb (band i) b); ring. Qed.

(** Cauchy–Schwarz within a band. *)
Lemma band_cauchy_schwarz d band q r b :
  Rabs (sumn d (fun i => ind band b i * (q i * r i))) <= band_norm d band q b * band_norm d band r b.
Proof.
  unfold band_norm.
  rewrite (sumn_ext d (fun i => ind band b i * (q i * r i)) (fun i => (ind band b i * q i) * (ind band b i * r i)))
    by (intros; rewrite <- (ind_idem band b i) at 1; ring).
  rewrite (sumn_ext d (fun i => ind band b i * q i ^ 2) (fun i => (ind band b i * q i) ^ 2))
    by (intros; rewrite <- (ind_idem band b i) at 1; ring).
  rewrite (sumn_ext d (fun i => ind band b i * r i ^ 2) (fun i => (ind band b i * r i) ^ 2))
    by (intros; rewrite <- (ind_idem band b i) at 1; ring).
  apply sumn_cauchy_schwarz.
Qed.

(** The Tier-A bound: for every query [q] (adaptive ones included), a residual [r] whose band
    norms are bounded by the witness [w], and [sm ≥ 0]. *)
Theorem tier_a : forall d nb (band : nat -> nat) (q r w : nat -> R) (sm : R),
  (forall i, (i < d)%nat -> (band i < nb)%nat) ->
  (forall b, (b < nb)%nat -> band_norm d band r b <= w b) ->
  0 <= sm ->
  Rabs (sm * sumn d (fun i => q i * r i)) <= sm * sumn nb (fun b => band_norm d band q b * w b).
Proof.
  intros d nb band q r w sm Hband Hw Hsm.
  rewrite Rabs_mult, (Rabs_pos_eq sm Hsm). apply Rmult_le_compat_l; [exact Hsm|].
  rewrite (sum_by_bands d nb band) by exact Hband.
  eapply Rle_trans; [apply sumn_abs|]. apply sumn_le. intros b Hb.
  eapply Rle_trans; [apply band_cauchy_schwarz|].
  apply Rmult_le_compat_l; [apply sqrt_pos | apply Hw, Hb].
Qed.

(** RoPE: each pair [k] of channels is rotated by its own angle [th k]. *)
Lemma rotation_preserves_pair (c s x y : R) : c ^ 2 + s ^ 2 = 1 ->
  (c * x - s * y) ^ 2 + (s * x + c * y) ^ 2 = x ^ 2 + y ^ 2.
Proof. intros H. replace ((c * x - s * y) ^ 2 + (s * x + c * y) ^ 2) with ((c ^ 2 + s ^ 2) * (x ^ 2 + y ^ 2)) by ring.
  rewrite H. ring. Qed.

Lemma cos_sin_sq t : cos t ^ 2 + sin t ^ 2 = 1.
Proof. rewrite Rplus_comm. pose proof (sin2_cos2 t). unfold Rsqr in H. lra. Qed.

(** Interleaved pairs [(2k, 2k+1)], bands made of whole pairs ([band i = bp (i / 2)]). *)
Definition rope_interleaved (th : nat -> R) (x : nat -> R) (i : nat) : R :=
  if Nat.even i then cos (th (i / 2)%nat) * x i - sin (th (i / 2)%nat) * x (S i)
  else sin (th (i / 2)%nat) * x (pred i) + cos (th (i / 2)%nat) * x i.

Lemma div2_even k : ((2 * k) / 2 = k)%nat.
Proof. rewrite Nat.mul_comm. apply Nat.div_mul. lia. Qed.

Lemma div2_odd k : ((2 * k + 1) / 2 = k)%nat.
Proof. symmetry. apply (Nat.div_unique _ 2 k 1); lia. Qed.

Theorem band_norm_rope_interleaved : forall m (bp : nat -> nat) th x b,
  band_norm (2 * m) (fun i => bp (i / 2)%nat) (rope_interleaved th x) b =
  band_norm (2 * m) (fun i => bp (i / 2)%nat) x b.
Proof.
  intros m bp th x b. unfold band_norm. f_equal.
  rewrite !sumn_pairs_interleaved. apply sumn_ext. intros k _.
  unfold ind, rope_interleaved. rewrite div2_even, div2_odd.
  replace (Nat.even (2 * k)) with true by (symmetry; apply Nat.even_spec; exists k; lia).
  replace (Nat.even (2 * k + 1)) with false
    by (symmetry; apply Bool.not_true_iff_false; rewrite Nat.even_spec; intros [j Hj]; lia).
  replace (S (2 * k)) with (2 * k + 1)%nat by lia. replace (pred (2 * k + 1)) with (2 * k)%nat by lia.
  destruct (Nat.eqb (bp k) b).
  - rewrite !Rmult_1_l. apply rotation_preserves_pair, cos_sin_sq.
  - ring.
Qed.

(** Pairs [(k, k + m)] (the "halves" layout), bands made of whole pairs. *)
Definition pair_of (m i : nat) : nat := if Nat.ltb i m then i else (i - m)%nat.

Definition rope_halves (m : nat) (th : nat -> R) (x : nat -> R) (i : nat) : R :=
  if Nat.ltb i m then cos (th i) * x i - sin (th i) * x (i + m)%nat
  else sin (th (i - m)%nat) * x (i - m)%nat + cos (th (i - m)%nat) * x i.

Theorem band_norm_rope_halves : forall m (bp : nat -> nat) th x b,
  band_norm (2 * m) (fun i => bp (pair_of m i)) (rope_halves m th x) b =
  band_norm (2 * m) (fun i => bp (pair_of m i)) x b.
Proof.
  intros m bp th x b. unfold band_norm. f_equal.
  rewrite !sumn_pairs_halves. apply sumn_ext. intros k Hk.
  unfold ind, rope_halves, pair_of.
  replace (Nat.ltb k m) with true by (symmetry; apply Nat.ltb_lt; lia).
  replace (Nat.ltb (m + k) m) with false by (symmetry; apply Nat.ltb_ge; lia).
  replace (m + k - m)%nat with k by lia. replace (k + m)%nat with (m + k)%nat by lia.
  destruct (Nat.eqb (bp k) b).
  - rewrite !Rmult_1_l. apply rotation_preserves_pair, cos_sin_sq.
  - ring.
Qed.
