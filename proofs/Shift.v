(** The rounding error of the subtractive dither is a shifted discrete uniform
    (docs/certificate.md §4.2).

    Fix the value [y] and the [K] dither values [ξ_i = (2i + 1 − K)/(2K)].  Let [f] be any
    non-decreasing rounding within [θ] of the identity with [2θ < 1/K] (binary32 round-to-nearest
    on [|t| < 128] with [θ = 2^-18], [K ≤ 2^16]: [Shift.fp32_rounding]), [rnd] any non-decreasing
    integer rounding within [1/2] (rint), [k_i = rnd(f(y + ξ_i))] and [E_i = k_i − (y + ξ_i)].
    Then, as a multiset, [{E_i} = {μ + ξ_j}] with [|μ| ≤ 1/(2K) + θ]: every average over the
    dither of a function of the error is that function's average over the centred grid, shifted by
    a bias [μ] no larger than [1/(2K) + θ]. *)

From Coq Require Import Reals Lra Lia Psatz ZArith.
From Flocq Require Import Core.
From Witcert Require Import Sum DotFloat Dither.
Open Scope R_scope.

Lemma sumn_shift n f : sumn (S n) f = f 0%nat + sumn n (fun i => f (S i)).
Proof. induction n as [|n IH]; cbn [sumn] in *; [lra|]. rewrite IH. cbn [sumn]. lra. Qed.

Lemma sumn_rev n f : sumn n (fun i => f (n - 1 - i)%nat) = sumn n f.
Proof.
  induction n as [|n IH]; [reflexivity|].
  rewrite sumn_shift. cbn [sumn].
  replace (S n - 1 - 0)%nat with n by lia.
  rewrite (sumn_ext n (fun i => f (S n - 1 - S i)%nat) (fun i => f (n - 1 - i)%nat)) by (intros; f_equal; lia).
  rewrite IH. lra.
Qed.

Lemma sumn_nonneg_zero n f : (forall i, (i < n)%nat -> 0 <= f i) -> sumn n f = 0 ->
  forall i, (i < n)%nat -> f i = 0.
Proof.
  induction n as [|n IH]; intros Hf H i Hi; [lia|]. cbn [sumn] in H.
  assert (0 <= sumn n f) by (apply sumn_nonneg; intros; apply Hf; lia).
  assert (0 <= f n) by (apply Hf; lia).
  destruct (Nat.eq_dec i n) as [-> | Ni]; [lra|]. apply IH; [intros; apply Hf; lia | lra | lia].
Qed.

Lemma sumn_id n : sumn n (fun j => INR j) = INR n * (INR n - 1) / 2.
Proof. induction n as [|n IH]; cbn [sumn]; [simpl; lra|]. rewrite IH, S_INR. field. Qed.

(** An integer sequence, non-decreasing on [[0, K)], that rises by at most one: a threshold. *)
Lemma threshold_form (K : nat) (k : nat -> Z) :
  (1 <= K)%nat ->
  (forall i j, (i <= j < K)%nat -> (k i <= k j)%Z) -> (k (K - 1)%nat <= k 0%nat + 1)%Z ->
  exists J, (J <= K)%nat /\ forall i, (i < K)%nat -> k i = if Nat.ltb i J then k 0%nat else (k 0%nat + 1)%Z.
Proof.
  induction K as [|K IH]; intros HK Hmono Hspan; [lia|].
  destruct K as [|K].
  - exists 1%nat. split; [lia|]. intros i Hi. replace i with 0%nat by lia. reflexivity.
  - assert (Hspan' : (k (S K - 1)%nat <= k 0%nat + 1)%Z).
    { replace (S K - 1)%nat with K by lia. apply Z.le_trans with (k (S K)); [apply Hmono; lia|].
      replace (S (S K) - 1)%nat with (S K) in Hspan by lia. exact Hspan. }
    destruct (IH ltac:(lia) (fun i j Hij => Hmono i j ltac:(lia)) Hspan') as [J [HJ HJk]].
    replace (S (S K) - 1)%nat with (S K) in Hspan by lia.
    assert (Hlast : (k 0%nat <= k (S K))%Z) by (apply Hmono; lia).
    destruct (Nat.eq_dec J (S K)) as [EJ | NJ].
    + destruct (Z.eq_dec (k (S K)) (k 0%nat)) as [E | N].
      * exists (S (S K)). split; [lia|]. intros i Hi.
        replace (Nat.ltb i (S (S K))) with true by (symmetry; apply Nat.ltb_lt; lia).
        destruct (Nat.eq_dec i (S K)) as [-> | Ni]; [exact E|].
        rewrite HJk by lia. subst J. replace (Nat.ltb i (S K)) with true by (symmetry; apply Nat.ltb_lt; lia).
        reflexivity.
      * exists J. split; [lia|]. intros i Hi.
        destruct (Nat.eq_dec i (S K)) as [-> | Ni].
        -- subst J. rewrite Nat.ltb_irrefl. lia.
        -- apply HJk. lia.
    + exists J. split; [lia|]. intros i Hi.
      destruct (Nat.eq_dec i (S K)) as [-> | Ni]; [|apply HJk; lia].
      replace (Nat.ltb (S K) J) with false by (symmetry; apply Nat.ltb_ge; lia).
      assert (k K = (k 0%nat + 1)%Z).
      { rewrite HJk by lia. replace (Nat.ltb K J) with false by (symmetry; apply Nat.ltb_ge; lia). reflexivity. }
      assert (k K <= k (S K))%Z by (apply Hmono; lia). lia.
Qed.

Section ShiftedUniform.
Variables (K : nat) (y theta : R) (f : R -> R) (rnd : R -> Z).
Definition xi (i : nat) : R := (2 * INR i + 1 - INR K) / (2 * INR K).
Hypothesis HK : (1 <= K)%nat.
Hypothesis Hf_mono : forall a b, a <= b -> f a <= f b.
Hypothesis Hf_err : forall i, (i < K)%nat -> Rabs (f (y + xi i) - (y + xi i)) <= theta.
Hypothesis Htheta : 2 * theta < / INR K.
Hypothesis Hrnd_mono : forall a b, a <= b -> (rnd a <= rnd b)%Z.
Hypothesis Hrnd_err : forall t, Rabs (IZR (rnd t) - t) <= / 2.

Definition code (i : nat) : Z := rnd (f (y + xi i)).
Definition err (i : nat) : R := IZR (code i) - (y + xi i).

Lemma INR_K_pos : 0 < INR K.
Proof. apply lt_0_INR. lia. Qed.

Lemma xi_step i : xi i = xi 0 + INR i / INR K.
Proof. unfold xi. pose proof INR_K_pos. simpl INR. field. lra. Qed.

Lemma err_bound i : (i < K)%nat -> Rabs (err i) <= / 2 + theta.
Proof.
  intros Hi.
  unfold err, code. replace (IZR (rnd (f (y + xi i))) - (y + xi i))
    with ((IZR (rnd (f (y + xi i))) - f (y + xi i)) + (f (y + xi i) - (y + xi i))) by ring.
  eapply Rle_trans; [apply Rabs_triang|]. pose proof (Hrnd_err (f (y + xi i))). pose proof (Hf_err i Hi). lra.
Qed.

Lemma code_threshold : exists J, (J <= K)%nat /\
  forall i, (i < K)%nat -> code i = if Nat.ltb i J then code 0%nat else (code 0%nat + 1)%Z.
Proof.
  pose proof INR_K_pos as HKp.
  apply threshold_form; [exact HK| |].
  - intros i j Hij. unfold code. apply Hrnd_mono, Hf_mono.
    rewrite (xi_step i), (xi_step j). assert (INR i <= INR j) by (apply le_INR; lia).
    unfold Rdiv. assert (0 < / INR K) by (apply Rinv_0_lt_compat; lra). nra.
  - (* f(t_{K−1}) − f(t_0) ≤ (K − 1)/K + 2θ < 1, and each rnd is within 1/2 *)
    unfold code. set (a := f (y + xi 0)). set (b := f (y + xi (K - 1))).
    assert (Hba : b - a < 1).
    { unfold a, b. pose proof (Hf_err 0%nat ltac:(lia)) as H0. pose proof (Hf_err (K - 1)%nat ltac:(lia)) as H1.
      apply Rabs_le_inv' in H0. apply Rabs_le_inv' in H1.
      assert (Hx : xi (K - 1) - xi 0 = 1 - / INR K).
      { rewrite (xi_step (K - 1)). rewrite minus_INR by lia. simpl INR. field. lra. }
      lra. }
    pose proof (Hrnd_err a) as Ha. pose proof (Hrnd_err b) as Hb.
    apply Rabs_le_inv' in Ha. apply Rabs_le_inv' in Hb.
    assert (IZR (rnd b) - IZR (rnd a) < 2) by lra.
    rewrite <- minus_IZR in H. apply lt_IZR in H. lia.
Qed.

(** The bias: the mean of the errors. *)
Definition mu : R := / INR K * sumn K err.

(** The errors are the grid shifted by [μ], as a multiset: any function averages alike. *)
Theorem errors_are_shifted_grid : forall g : R -> R, sumn K (fun i => g (err i)) = sumn K (fun j => g (mu + xi j)).
Proof.
  pose proof INR_K_pos as HKp.
  destruct code_threshold as [J [HJ Hc]].
  set (n := code 0%nat).
  (* the progression's start *)
  set (c := IZR n - y - xi 0 - (INR J - 1) / INR K).
  assert (Herr : forall i, (i < K)%nat -> err i = if Nat.ltb i J then c + INR (J - 1 - i) / INR K
                                                  else c + INR (K + J - 1 - i) / INR K).
  { intros i Hi. unfold err. rewrite Hc by exact Hi. fold n. rewrite (xi_step i). unfold c.
    destruct (Nat.ltb_spec i J).
    - rewrite !minus_INR by lia. simpl INR. clear c. clearbody n. field. lra.
    - rewrite plus_IZR, !minus_INR, plus_INR by lia. simpl INR. clear c. clearbody n. field. lra. }
  assert (Hsum : forall g : R -> R, sumn K (fun i => g (err i)) = sumn K (fun j => g (c + INR j / INR K))).
  { intros g. replace K with (J + (K - J))%nat at 1 by lia. rewrite sumn_add.
    rewrite (sumn_ext J (fun i => g (err i)) (fun i => g (c + INR (J - 1 - i) / INR K)))
      by (intros i Hi; rewrite Herr by lia; replace (Nat.ltb i J) with true by (symmetry; apply Nat.ltb_lt; lia);
          reflexivity).
    rewrite (sumn_rev J (fun j => g (c + INR j / INR K))).
    rewrite (sumn_ext (K - J) (fun k0 => g (err (J + k0)%nat))
                      (fun i => g (c + INR (J + (K - J - 1 - i)) / INR K))).
    2: { intros i Hi. rewrite Herr by lia. replace (Nat.ltb (J + i) J) with false by (symmetry; apply Nat.ltb_ge; lia).
         f_equal. f_equal. f_equal. f_equal. lia. }
    rewrite (sumn_rev (K - J) (fun i => g (c + INR (J + i) / INR K))).
    assert (E := sumn_add J (K - J) (fun j => g (c + INR j / INR K))).
    replace (J + (K - J))%nat with K in E by lia. rewrite E. reflexivity. }
  (* μ = c + (K − 1)/(2K) *)
  assert (Hmu : mu = c + (INR K - 1) / (2 * INR K)).
  { pose proof (Hsum (fun e => e)) as Hs. cbv beta in Hs. unfold mu.
    replace (sumn K err) with (sumn K (fun j => c + INR j / INR K)) by (rewrite <- Hs; reflexivity).
    rewrite sumn_plus, sumn_const.
    rewrite (sumn_ext K (fun j => INR j / INR K) (fun j => / INR K * INR j)) by (intros; unfold Rdiv; ring).
    rewrite sumn_scal, sumn_id. field. lra. }
  intros g. rewrite Hsum. apply sumn_ext. intros j _. f_equal. rewrite Hmu. unfold xi. field. lra.
Qed.

Theorem bias_bound : Rabs mu <= / (2 * INR K) + theta.
Proof.
  pose proof INR_K_pos as HKp.
  (* the mean of values that are a progression c, c + 1/K, …, c + (K−1)/K, all within 1/2 + θ *)
  assert (Hlo : forall j, (j < K)%nat -> - (/ 2 + theta) <= mu + xi j <= / 2 + theta).
  { intros j Hj.
    (* the indicator of leaving [−(1/2 + θ), 1/2 + θ] sums to zero over the errors, so over the grid *)
    set (out := fun e => if Rle_dec e (/ 2 + theta) then (if Rle_dec (- (/ 2 + theta)) e then 0 else 1) else 1).
    assert (Hout : forall e, 0 <= out e) by (intros e; unfold out; repeat destruct Rle_dec; lra).
    assert (H0 : sumn K (fun i => out (err i)) = 0).
    { rewrite (sumn_ext K _ (fun _ => 0)); [rewrite sumn_const; ring|].
      intros i Hi. pose proof (err_bound i Hi) as Hb. apply Rabs_le_inv' in Hb. unfold out.
      destruct Rle_dec; [|lra]. destruct Rle_dec; [reflexivity | lra]. }
    rewrite (errors_are_shifted_grid out) in H0.
    assert (Hz := sumn_nonneg_zero K (fun j0 => out (mu + xi j0)) (fun j0 _ => Hout (mu + xi j0)) H0 j Hj).
    cbv beta in Hz. unfold out in Hz. revert Hz. repeat destruct Rle_dec; intros; lra. }
  destruct (Hlo 0%nat ltac:(lia)) as [A _]. destruct (Hlo (K - 1)%nat ltac:(lia)) as [_ B].
  unfold xi in A, B. rewrite minus_INR in B by lia. simpl INR in A, B.
  apply Rabs_le. split.
  - apply (Rplus_le_reg_r ((2 * 0 + 1 - INR K) / (2 * INR K))).
    replace (- (/ (2 * INR K) + theta) + (2 * 0 + 1 - INR K) / (2 * INR K)) with (- (/ 2 + theta)) by (field; lra).
    exact A.
  - apply (Rplus_le_reg_r ((2 * (INR K - 1) + 1 - INR K) / (2 * INR K))).
    replace (/ (2 * INR K) + theta + (2 * (INR K - 1) + 1 - INR K) / (2 * INR K)) with (/ 2 + theta) by (field; lra).
    exact B.
Qed.

End ShiftedUniform.

(** binary32 round-to-nearest is within [2^-18] below 128 in magnitude (half an ulp of [2^-17]). *)
Lemma rnd32_err_small t : Rabs t < 128 -> Rabs (rnd32 t - t) <= bpow radix2 (-18).
Proof.
  intros Ht. destruct (Req_dec t 0) as [-> | Hn].
  { unfold rnd32. rewrite round_0 by apply valid_rnd_N. rewrite Rminus_0_r, Rabs_R0. apply bpow_ge_0. }
  assert (Hv : Valid_exp (FLT_exp (-149) 24)) by (apply FLT_exp_valid; unfold Prec_gt_0; lia).
  unfold rnd32. eapply Rle_trans; [apply error_le_half_ulp; exact Hv|].
  rewrite ulp_neq_0 by exact Hn. unfold cexp, FLT_exp.
  assert (Hm : (mag radix2 t <= 7)%Z) by (apply mag_le_bpow; [exact Hn | simpl; lra]).
  replace (bpow radix2 (-18)) with (/ 2 * bpow radix2 (-17)) by (simpl; lra).
  apply Rmult_le_compat_l; [lra|]. apply bpow_le. lia.
Qed.

(** The lemma for the write path: [z = fl32(y + ξ_i)], [k = rint z] (ties to even), [m ≤ 16] dither
    bits, [|y| ≤ 127]: the errors are the [2^m]-point grid shifted by [|μ| ≤ 2^-(m+1) + 2^-18]. *)
Theorem fp32_shifted_uniform : forall (m : nat) (y : R) (g : R -> R),
  (m <= 16)%nat -> Rabs y <= 127 ->
  let K := (2 ^ m)%nat in
  let k i := Znearest (fun n => negb (Z.even n)) (rnd32 (y + xi K i)) in
  sumn K (fun i => g (IZR (k i) - (y + xi K i))) =
    sumn K (fun j => g (mu K y rnd32 (Znearest (fun n => negb (Z.even n))) + xi K j)) /\
  Rabs (mu K y rnd32 (Znearest (fun n => negb (Z.even n)))) <= / (2 * INR K) + bpow radix2 (-18).
Proof.
  intros m y g Hm Hy K k.
  assert (HK1 : (1 <= K)%nat) by (unfold K; pose proof (Nat.pow_nonzero 2 m ltac:(lia)); lia).
  assert (HKr : INR K = 2 ^ m) by (unfold K; rewrite pow_INR; simpl; replace (1 + 1) with 2 by ring; reflexivity).
  assert (Hxi : forall i, (i < K)%nat -> Rabs (xi K i) < / 2).
  { intros i Hi. unfold xi. assert (HKp : 0 < INR K) by (apply lt_0_INR; lia).
    assert (INR i + 1 <= INR K) by (rewrite <- S_INR; apply le_INR; lia).
    pose proof (pos_INR i). apply Rabs_def1; apply (Rmult_lt_reg_r (2 * INR K)); try lra;
      unfold Rdiv; rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra; lra. }
  assert (Hth : 2 * bpow radix2 (-18) < / INR K).
  { rewrite HKr. replace (2 * bpow radix2 (-18)) with (bpow radix2 (-17)) by (simpl; lra).
    rewrite <- (Rinv_inv (bpow radix2 (-17))). apply Rinv_lt_contravar.
    - apply Rmult_lt_0_compat; [apply pow_lt; lra | apply Rinv_0_lt_compat, bpow_gt_0].
    - replace (/ bpow radix2 (-17)) with (2 ^ 17) by (simpl; lra).
      apply Rle_lt_trans with (2 ^ 16); [apply Rle_pow; [lra | lia] | simpl; lra]. }
  assert (Hf : forall i, (i < K)%nat -> Rabs (rnd32 (y + xi K i) - (y + xi K i)) <= bpow radix2 (-18)).
  { intros i Hi. apply rnd32_err_small. pose proof (Hxi i Hi).
    eapply Rle_lt_trans; [apply Rabs_triang|]. lra. }
  assert (Hmono : forall a b, a <= b -> rnd32 a <= rnd32 b)
    by (intros a b Hab; apply round_le; [apply FLT_exp_valid; unfold Prec_gt_0; lia | apply valid_rnd_N | exact Hab]).
  assert (Hrm : forall a b, a <= b -> (ZnearestE a <= ZnearestE b)%Z)
    by (intros a b Hab; apply Zrnd_le; [apply valid_rnd_N | exact Hab]).
  assert (Hre : forall t, Rabs (IZR (ZnearestE t) - t) <= / 2)
    by (intros t; rewrite Rabs_minus_sym; apply Znearest_half).
  split.
  - exact (errors_are_shifted_grid K y (bpow radix2 (-18)) rnd32 ZnearestE HK1 Hmono Hf Hth Hrm Hre g).
  - exact (bias_bound K y (bpow radix2 (-18)) rnd32 ZnearestE HK1 Hmono Hf Hth Hrm Hre).
Qed.

(** With [Dither.dither_mgf]: the centred error of the binary32 write path has the sub-Gaussian
    proxy [(1 − 1/K²)/12] over the dither, [K = 2^m], [m ≤ 16]. *)
Theorem fp32_error_mgf : forall (m : nat) (y lam : R), (m <= 16)%nat -> Rabs y <= 127 ->
  let K := (2 ^ m)%nat in
  let e i := IZR (Znearest (fun n => negb (Z.even n)) (rnd32 (y + xi K i))) - (y + xi K i) in
  let mu0 := mu K y rnd32 (Znearest (fun n => negb (Z.even n))) in
  / 2 ^ m * sumn K (fun i => exp (lam * (e i - mu0))) <= exp (lam ^ 2 * (1 - / (2 ^ m) ^ 2) / 24).
Proof.
  intros m y lam Hm Hy K e mu0.
  destruct (fp32_shifted_uniform m y (fun v => exp (lam * (v - mu0))) Hm Hy) as [E _].
  fold K in E. cbv beta in E. unfold e. rewrite E.
  eapply Rle_trans; [|apply (dither_mgf m lam)]. right. unfold mgf. f_equal.
  apply sumn_ext. intros j _. f_equal. unfold grid, xi.
  assert (HKr : INR K = 2 ^ m) by (unfold K; rewrite pow_INR; simpl; replace (1 + 1) with 2 by ring; reflexivity).
  rewrite HKr. unfold mu0. ring.
Qed.
